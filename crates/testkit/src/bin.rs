//! Where the `mssql-cdc` binary is.

use std::path::PathBuf;

/// The `mssql-cdc` binary child processes run: `MSSQL_CDC_BIN` when set; the running
/// executable when it is `mssql-cdc` itself (`demo`, `bench`); else `mssql-cdc` in the target
/// directory of the running test (`target/<profile>/deps/<suite>-<hash>` is a test,
/// `target/<profile>/mssql-cdc` the binary cargo built with it).
pub fn mssql_cdc() -> PathBuf {
    if let Some(path) = std::env::var_os("MSSQL_CDC_BIN") {
        return PathBuf::from(path);
    }
    let Ok(current) = std::env::current_exe() else {
        return PathBuf::from("mssql-cdc");
    };
    if current.file_stem().is_some_and(|stem| stem == "mssql-cdc") {
        return current;
    }
    let mut dir = current.parent().map(PathBuf::from).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join("mssql-cdc")
}
