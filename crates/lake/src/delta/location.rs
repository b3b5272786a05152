//! Where a Delta table lives: a local path or an object-store URL.

use mssql_cdc_core::config::problem::Problems;

/// URL schemes accepted for tables, besides plain local paths.
pub const TABLE_SCHEMES: &[&str] = &["file", "s3", "s3a", "gs", "az", "abfs", "abfss", "memory"];

/// The expected form of a table location, for problems.
pub const TABLE_FORM: &str = "a local path or a URL with scheme file, s3, s3a, gs, az, abfs or abfss";

/// Whether `location` names a table: a non-empty local path, or a URL with a known scheme.
pub fn is_valid_table_location(location: &str) -> bool {
    if location.trim().is_empty() {
        return false;
    }
    match location.split_once("://") {
        Some((scheme, rest)) => TABLE_SCHEMES.contains(&scheme) && !rest.is_empty(),
        None => true,
    }
}

/// `location` in a comparable form, without I/O: a URL as written, a local path made absolute
/// as a `file://` URL; no trailing slash. Two locations name the same table when these agree.
pub fn normalized(location: &str) -> String {
    let url = if location.contains("://") {
        location.to_owned()
    } else {
        std::path::absolute(location).ok().and_then(|p| url::Url::from_directory_path(p).ok()).map_or_else(|| location.to_owned(), |u| u.to_string())
    };
    url.trim_end_matches('/').to_owned()
}

/// The cargo feature a location's scheme needs when this build lacks it (`gs` without `gcs`,
/// `az`/`abfs`/`abfss` without `azure`).
pub fn missing_feature(location: &str) -> Option<&'static str> {
    match location.split_once("://").map(|(scheme, _)| scheme) {
        Some("gs") if !cfg!(feature = "gcs") => Some("gcs"),
        Some("az" | "abfs" | "abfss") if !cfg!(feature = "azure") => Some("azure"),
        _ => None,
    }
}

/// Checks an optional table location option (missing when required, or malformed) and yields
/// the location when it is present and valid.
pub fn check_location(problems: &mut Problems, key: &str, location: Option<&str>, required: bool) -> Option<String> {
    match location {
        None if required => problems.missing(key, TABLE_FORM),
        Some(location) if !is_valid_table_location(location) => problems.invalid(key, "not a table location", TABLE_FORM),
        Some(location) if missing_feature(location).is_some() => {
            let feature = missing_feature(location).unwrap_or_default();
            problems.invalid(key, format!("this build has no {feature} object store"), format!("a build with `--features {feature}` (or a local, file:// or s3:// location)"));
        }
        Some(location) => return Some(location.to_owned()),
        None => {}
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_locations() {
        assert!(is_valid_table_location("./data/bronze/orders"));
        assert!(is_valid_table_location("s3://lake/bronze/orders"));
        assert!(!is_valid_table_location(""));
        assert!(!is_valid_table_location("ftp://x/y"));
        assert!(!is_valid_table_location("s3://"));
    }

    /// A scheme whose backend this build leaves out is named with the feature that adds it.
    #[test]
    fn schemes_name_their_feature() {
        assert_eq!(missing_feature("s3://lake/t"), None);
        assert_eq!(missing_feature("./t"), None);
        assert_eq!(missing_feature("gs://lake/t"), (!cfg!(feature = "gcs")).then_some("gcs"));
        assert_eq!(missing_feature("abfss://c@a.dfs.core.windows.net/t"), (!cfg!(feature = "azure")).then_some("azure"));
    }

    /// A relative path, its absolute form and its `file://` URL name one table.
    #[test]
    fn locations_normalize_to_one_form() {
        let absolute = std::path::absolute("data/bronze").unwrap();
        let url = url::Url::from_directory_path(&absolute).unwrap().to_string();
        assert_eq!(normalized("data/bronze"), normalized(absolute.to_str().unwrap()));
        assert_eq!(normalized("data/bronze/"), normalized(&url));
        assert_eq!(normalized("s3://lake/t/"), "s3://lake/t");
        assert_ne!(normalized("s3://lake/t"), normalized("s3://lake/u"));
    }
}
