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

/// Checks an optional table location option (missing when required, or malformed) and yields
/// the location when it is present and valid.
pub fn check_location(problems: &mut Problems, key: &str, location: Option<&str>, required: bool) -> Option<String> {
    match location {
        None if required => problems.missing(key, TABLE_FORM),
        Some(location) if !is_valid_table_location(location) => problems.invalid(key, "not a table location", TABLE_FORM),
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
