//! The `mssql-cdc` binary: see `mssql-cdc --help` and the README.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    cap_malloc_arenas();
    let cli = cli::Cli::parse();
    match cli::run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// The arenas glibc's malloc may keep, unless `MALLOC_ARENA_MAX` is set already.
const MALLOC_ARENAS: &str = "2";

/// Runs the binary again, in place, with glibc's malloc held to [`MALLOC_ARENAS`] arenas.
///
/// By default glibc gives allocating threads up to 8 arenas per core, and memory freed in one
/// arena is kept there for that arena's next allocations. The Delta and Parquet work of a sink
/// moves between Tokio's worker and blocking threads, so freed memory piled up across arenas:
/// bronze's RSS grew by about 0.40 MB per commit where its live state grew by about 0.1 MB
/// (docs/performance.md, "Memory over a long backlog"). glibc reads the setting only when
/// the process starts, hence the `exec` (same process id, same arguments), done before any
/// thread exists. A user's own `MALLOC_ARENA_MAX` is kept as it is; other C libraries ignore
/// the variable.
fn cap_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
            return;
        }
        let Ok(binary) = std::env::current_exe() else { return };
        let mut arguments = std::env::args_os();
        let name = arguments.next().unwrap_or_else(|| binary.clone().into_os_string());
        // `exec` returns only when it failed; the binary then runs on with glibc's default.
        let error = std::process::Command::new(&binary).arg0(name).args(arguments).env("MALLOC_ARENA_MAX", MALLOC_ARENAS).exec();
        eprintln!("warning: running on with glibc's default malloc arenas: restarting {} with MALLOC_ARENA_MAX={MALLOC_ARENAS} failed: {error}", binary.display());
    }
}
