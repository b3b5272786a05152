//! The command line describes itself: `--help` lists every subcommand with a one-line
//! description, and `demo` runs the whole pipeline on a machine with nothing installed.
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::process::Command;

#[test]
fn help_lists_every_subcommand_with_a_description() {
    let output = Command::new(support::bin()).arg("--help").output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for command in ["demo", "broker", "validate", "run", "snapshot", "status", "health"] {
        let line = help
            .lines()
            .find(|line| line.trim_start().starts_with(&format!("{command} ")))
            .unwrap_or_else(|| panic!("{command} missing from:\n{help}"));
        assert!(line.split_whitespace().count() > 3, "{command} has no description: {line}");
    }
}

/// `health` answers by exit code: 0 when a process's `/health` says 200 (the container
/// image's HEALTHCHECK), 1 when nothing answers.
#[test]
fn health_answers_by_exit_code() {
    let broker = support::TestBroker::start().unwrap();
    let metrics = broker.metrics.expect("the test broker serves /metrics and /health");
    let status = Command::new(support::bin()).args(["health", "--address", &metrics.to_string()]).status().unwrap();
    assert!(status.success(), "the broker's /health answers 200");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let status = Command::new(support::bin()).args(["health", "--address", &closed.to_string(), "--timeout", "2"]).status().unwrap();
    assert_eq!(status.code(), Some(1), "nothing listens there");
}

/// Invariant: the README's main command works with nothing but the binary: the simulator,
/// the embedded broker and the three stages run, and when the workload stops silver is read
/// back equal to the simulator's table (the demo exits 1 otherwise).
#[test]
fn demo_ends_with_silver_equal_to_the_simulator_table() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(support::bin()).args(["demo", "--duration", "12", "--rate", "300"]).current_dir(dir.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("check: silver equals dbo.orders"), "{stdout}");
    assert!(stdout.contains("12 columns compared"), "{stdout}");
    for table in ["bronze/orders", "silver/orders", "ops/facts", "ops/finalization"] {
        assert!(dir.path().join("demo-data/lake").join(table).join("_delta_log").is_dir(), "{table} missing");
    }
}

/// Invariant: the demo never deletes a `./demo-data` that is not its own.
#[test]
fn demo_refuses_a_data_directory_it_did_not_make() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("demo-data")).unwrap();
    std::fs::write(dir.path().join("demo-data/precious.txt"), "keep me").unwrap();
    let output = Command::new(support::bin()).args(["demo", "--duration", "1"]).current_dir(dir.path()).output().unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not a previous demo's"), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(dir.path().join("demo-data/precious.txt").exists());
}

/// Invariant: the simulator benchmark reads over TDS exactly the change rows the workload
/// produced (the command fails otherwise).
#[test]
fn sim_bench_reads_every_change_over_tds() {
    let output = Command::new(support::bin()).args(["sim", "bench", "--changes", "3000"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("3000 changes"), "{stdout}");
    assert!(stdout.contains("tiberius read over TDS"), "{stdout}");
}

/// Invariant: the backlog memory run (`bench backlog`, 10M changes at full size) catches up
/// end to end, silver ending with as many rows as the source table (the command fails
/// otherwise), and reports every stage's peak RSS against the 512 MB limit.
#[test]
fn bench_backlog_catches_up_and_reports_each_stages_peak_memory() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(support::bin())
        .args(["bench", "backlog", "--changes", "3000", "--silver-deletion-vectors", "--dir"])
        .arg(dir.path().join("backlog"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    for stage in ["source", "bronze", "silver"] {
        let line = stdout.lines().find(|l| l.starts_with(&format!("| {stage} |"))).unwrap_or_else(|| panic!("no {stage} row: {stdout}"));
        assert!(line.ends_with("| yes |") && line.contains(" MB |"), "{line}");
    }
    assert!(stdout.contains("3000 changes") && stdout.contains("rows, as dbo.orders does"), "{stdout}");
}

/// Invariant: every `mssql-cdc` process runs with glibc's malloc held to 2 arenas and fixed
/// mapping and trim thresholds of 128 KiB, each unless the user set its variable (the sinks'
/// RSS otherwise grew with every commit and kept freed buffers, docs/performance.md, ADR 0013
/// and 0019), and the restart that sets them keeps the process id and arguments.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn every_process_runs_with_tuned_malloc_unless_the_user_chose() {
    // Unset: the binary's values; set: the user's, each variable on its own.
    const DEFAULTS: [(&str, &str); 3] = [("MALLOC_ARENA_MAX", "2"), ("MALLOC_MMAP_THRESHOLD_", "131072"), ("MALLOC_TRIM_THRESHOLD_", "131072")];
    let cases: [(Option<&str>, &str, &str); 6] = [
        (None, "MALLOC_ARENA_MAX", "2"),
        (Some("4"), "MALLOC_ARENA_MAX", "4"),
        (None, "MALLOC_MMAP_THRESHOLD_", "131072"),
        (Some("65536"), "MALLOC_MMAP_THRESHOLD_", "65536"),
        (None, "MALLOC_TRIM_THRESHOLD_", "131072"),
        (Some("262144"), "MALLOC_TRIM_THRESHOLD_", "262144"),
    ];
    for (given, variable, expected) in cases {
        let mut command = Command::new(support::bin());
        command.args(["broker", "--listen", "127.0.0.1:0", "--storage", "memory"]).env("RUST_LOG", "warn");
        for (name, _) in DEFAULTS {
            command.env_remove(name);
        }
        if let Some(value) = given {
            command.env(variable, value);
        }
        let mut broker = support::Process::spawn("mssql-cdc broker", command, support::Log::Capture).unwrap();
        // The line comes from the process after its restart, so the environment is final.
        broker.wait_line("listening on ", std::time::Duration::from_secs(60)).unwrap();
        let environ = std::fs::read(format!("/proc/{}/environ", broker.id())).unwrap();
        let values = |name: &str| -> Vec<String> {
            let prefix = format!("{name}=");
            environ.split(|b| *b == 0).filter_map(|entry| entry.strip_prefix(prefix.as_bytes())).map(|v| String::from_utf8_lossy(v).into_owned()).collect()
        };
        assert_eq!(values(variable), vec![expected.to_owned()], "{variable} given as {given:?}");
        // The user's choice of one variable leaves the others at the binary's values.
        for (other, default) in DEFAULTS.into_iter().filter(|(other, _)| *other != variable) {
            assert_eq!(values(other), vec![default.to_owned()], "{other} with {variable} given as {given:?}");
        }
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", broker.id())).unwrap();
        assert!(cmdline.split(|b| *b == 0).any(|argument| argument == b"--storage"), "the arguments survive the restart");
        broker.kill();
    }
}
