//! The command line describes itself: `--help` lists every subcommand with a one-line
//! description, and `demo` runs on a machine with nothing installed.

mod support;

use std::process::Command;

#[test]
fn help_lists_every_subcommand_with_a_description() {
    let output = Command::new(support::bin()).arg("--help").output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for command in ["demo", "broker", "validate"] {
        let line = help
            .lines()
            .find(|line| line.trim_start().starts_with(&format!("{command} ")))
            .unwrap_or_else(|| panic!("{command} missing from:\n{help}"));
        assert!(line.split_whitespace().count() > 3, "{command} has no description: {line}");
    }
}

/// Invariant: the README's main command works with nothing but the binary: the embedded
/// broker starts and every record sent comes back.
#[test]
fn demo_round_trips_records_through_the_embedded_broker() {
    let output = Command::new(support::bin()).args(["demo", "--records", "2000"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("produced 2000 records"), "{stdout}");
    assert!(stdout.contains("consumed 2000 records"), "{stdout}");
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
