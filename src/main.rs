//! The `mssql-cdc` binary: see `mssql-cdc --help` and the README.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    tune_malloc();
    let cli = cli::Cli::parse();
    match cli::run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// glibc malloc settings every process runs with, each unless the user set it already:
/// - `MALLOC_ARENA_MAX=2`: by default glibc gives allocating threads up to 8 arenas per core,
///   and memory freed in one arena is kept there for that arena's next allocations. The Delta
///   and Parquet work of a sink moves between Tokio's worker and blocking threads, so freed
///   memory piled up across arenas: bronze's RSS grew by about 0.40 MB per commit where its
///   live state grew by about 0.1 MB (docs/performance.md, "Memory over a long backlog").
/// - `MALLOC_MMAP_THRESHOLD_=131072` and `MALLOC_TRIM_THRESHOLD_=131072`: blocks of 128 KiB
///   and more (Arrow buffers, Parquet pages, fetched records) are mapped on their own and
///   given back when freed, and free memory at an arena's top is returned once 128 KiB of it
///   gathers. glibc's default raises the mapping threshold each time a mapped block is freed,
///   up to 32 MiB, after which such buffers are carved from the arenas and their free space
///   stays in the process: a copy-on-write silver's heap peaked at 100 MB over a 1M-change
///   backlog, where its RSS reached 250 MB (docs/performance.md, "Memory: glibc's mapping
///   threshold").
const MALLOC_SETTINGS: [(&str, &str); 3] = [("MALLOC_ARENA_MAX", "2"), ("MALLOC_MMAP_THRESHOLD_", "131072"), ("MALLOC_TRIM_THRESHOLD_", "131072")];

/// Runs the binary again, in place, with [`MALLOC_SETTINGS`] in its environment.
///
/// glibc reads these only when the process starts, hence the `exec` (same process id, same
/// arguments), done before any thread exists. A value the user sets is kept as it is; other
/// C libraries (musl) ignore the variables.
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        let missing: Vec<(&str, &str)> = MALLOC_SETTINGS.into_iter().filter(|(name, _)| std::env::var_os(name).is_none()).collect();
        if missing.is_empty() {
            return;
        }
        let Ok(binary) = std::env::current_exe() else { return };
        let mut arguments = std::env::args_os();
        let name = arguments.next().unwrap_or_else(|| binary.clone().into_os_string());
        // `exec` returns only when it failed; the binary then runs on with glibc's defaults.
        let error = std::process::Command::new(&binary).arg0(name).args(arguments).envs(missing.iter().copied()).exec();
        eprintln!("warning: running on with glibc's default malloc settings: restarting {} with {missing:?} failed: {error}", binary.display());
    }
}
