//! `mssql-cdc validate` and configuration safety: the example files pass; broken files exit 2
//! naming every key at fault; secrets never reach output, errors or logs.
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::{bin, repo, write_file};

fn validate(files: &[&Path], envs: &[(&str, &str)], extra: &[&str]) -> Output {
    let mut command = Command::new(bin());
    command.arg("validate").args(extra).args(files).env("RUST_LOG", "debug");
    for (key, value) in envs {
        command.env(key, value);
    }
    command.output().expect("run mssql-cdc validate")
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

fn example_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![repo().join("connectors")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|ext| ext == "toml") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Invariant: every example in `connectors/` is valid, so users can copy them.
#[test]
fn example_connector_files_are_valid() {
    let files = example_files();
    assert!(files.len() >= 5, "examples: {files:?}");
    let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let output = validate(&refs, &[], &[]);
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout).lines().filter(|line| line.starts_with("ok: ")).count(), files.len());
}

fn assert_problems(name: &str, body: &str, expected: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), name, body);
    let output = validate(&[&file], &[], &[]);
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(2), "{shown}");
    for fragment in expected {
        assert!(shown.contains(fragment), "expected {fragment:?} in:\n{shown}");
    }
}

const BRONZE: &str = "name = \"b\"\nkind = \"delta-bronze\"\ntopic = \"cdc.db.dbo.t\"\ntarget = \"./t\"\napp_id = \"a\"\n";

#[test]
fn an_unknown_key_is_named_with_the_keys_expected() {
    assert_problems("unknown.toml", &format!("{BRONZE}tagret = \"x\"\n"), &["`tagret`: unknown key", "one of:", "target"]);
}

#[test]
fn a_wrong_type_is_named_with_the_expected_form() {
    assert_problems(
        "type.toml",
        "name = \"s\"\nkind = \"mssql-source\"\nconnection_string = \"Server=x\"\ncapture_instances = \"dbo_orders\"\ntopic_prefix = \"cdc\"\n",
        &["`capture_instances`: wrong type: found a string", "expected a sequence"],
    );
}

#[test]
fn a_missing_required_key_is_named() {
    assert_problems(
        "missing.toml",
        "name = \"b\"\nkind = \"delta-bronze\"\ntopic = \"cdc.db.dbo.t\"\ntarget = \"./t\"\n",
        &["`app_id`: missing required key"],
    );
}

#[test]
fn a_bad_enum_value_lists_the_allowed_values() {
    assert_problems(
        "enum.toml",
        "name = \"v\"\nkind = \"delta-silver\"\nbronze = \"./b\"\ntarget = \"./s\"\napp_id = \"a\"\ncontrol_table = \"./c\"\ngranularity = \"week\"\n",
        &["`granularity`: unknown value", "one of: minute, hour, day"],
    );
}

#[test]
fn several_problems_are_reported_at_once() {
    assert_problems(
        "many.toml",
        "name = \"s\"\nkind = \"mssql-source\"\ncolour = 1\nmax_commits_per_batch = 0\nformat = \"xml\"\n[schema_registry]\nurl = 5\n",
        &[
            "`colour`: unknown key",
            "`format`: unknown value",
            "`schema_registry.url`: wrong type",
            "`max_commits_per_batch`: zero",
            "`connection_string`: missing required key",
            "`capture_instances`: missing required key",
            "`topic_prefix`: missing required key",
        ],
    );
}

#[test]
fn worker_files_are_checked_too() {
    assert_problems(
        "worker.toml",
        "[kafka]\nbootstrap_servers = \"nohost\"\nsecurity_protocol = \"sasl_ssl\"\n[kafka.properties]\n\"bootstrap.servers\" = \"x:1\"\n[telemetry]\nlisten = \"not an address\"\n",
        &[
            "`telemetry.listen`: invalid",
            "`kafka.bootstrap_servers`: not a list of host:port",
            "`kafka.sasl`: missing required key",
            "`kafka.properties.bootstrap.servers`: owned by a typed setting",
        ],
    );
}

#[test]
fn an_unknown_kind_lists_the_registered_kinds() {
    assert_problems(
        "kind.toml",
        "name = \"x\"\nkind = \"mongo-source\"\n",
        &["`kind`: unknown connector kind", "mssql-source, delta-bronze, delta-silver"],
    );
}

#[test]
fn invalid_toml_names_the_file_and_line() {
    assert_problems("syntax.toml", "name = \"x\"\nkind = \n", &["syntax.toml", "line 2"]);
}

/// Invariant: environment overrides are layered over the file and checked like it, naming
/// the variable a bad value came from.
#[test]
fn environment_overrides_are_layered_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "b.toml", BRONZE);
    let output = validate(&[&file], &[("MSSQL_CDC_CONNECTOR__B__APP_ID", "\"with#hash\"")], &["--show"]);
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(2), "{shown}");
    assert!(shown.contains("`app_id`: not an app id"), "{shown}");

    let output = validate(&[&file], &[("MSSQL_CDC_CONNECTOR__B__FACTS_TABLE", "./facts-from-env")], &["--show"]);
    let shown = text(&output);
    assert!(output.status.success(), "{shown}");
    assert!(shown.contains("./facts-from-env"), "{shown}");

    let output = validate(&[&file], &[("MSSQL_CDC_CONNECTOR__B__GRANULARITY", "hour")], &[]);
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(2), "{shown}");
    assert!(shown.contains("`granularity`: unknown key") && shown.contains("MSSQL_CDC_CONNECTOR__B__GRANULARITY"), "{shown}");
}

#[test]
fn two_connectors_with_one_name_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let first = write_file(dir.path(), "one.toml", BRONZE);
    let second = write_file(dir.path(), "two.toml", BRONZE);
    let output = validate(&[&first, &second], &[], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).contains("connector name also used by"), "{}", text(&output));
}

/// Invariant: a configured password never appears in Debug output (`--show`), in error
/// messages, or in logs (debug level), whichever way it was given.
#[test]
fn secrets_never_reach_output_errors_or_logs() {
    const SQL_PASSWORD: &str = "Sql-Pa55word-7f3a";
    const SASL_PASSWORD: &str = "Sasl-Pa55word-91c2";
    const PASSTHROUGH_SECRET: &str = "Oauth-Secret-55d1";
    const ENV_PASSWORD: &str = "Env-Pa55word-0b7e";
    let dir = tempfile::tempdir().unwrap();
    let source = write_file(
        dir.path(),
        "source.toml",
        &format!(
            "name = \"src\"\nkind = \"mssql-source\"\nconnection_string = \"Server=sql\"\nuser = \"u\"\npassword = \"{SQL_PASSWORD}\"\ncapture_instances = [\"dbo_t\"]\ntopic_prefix = \"cdc\"\n"
        ),
    );
    let worker = write_file(
        dir.path(),
        "worker.toml",
        &format!(
            "[kafka]\nsecurity_protocol = \"sasl_ssl\"\nsasl = {{ mechanism = \"plain\", username = \"u\", password = \"{SASL_PASSWORD}\" }}\nproperties = {{ \"sasl.oauthbearer.client.secret\" = \"{PASSTHROUGH_SECRET}\" }}\n"
        ),
    );
    // Valid files, shown in full with debug logs.
    let output = validate(&[&source, &worker], &[], &["--show"]);
    let shown = text(&output);
    assert!(output.status.success(), "{shown}");
    assert!(shown.contains("***"), "redaction marker expected:\n{shown}");

    // The same secrets next to errors, and one set through an environment override.
    let broken_source = write_file(
        dir.path(),
        "broken.toml",
        &format!(
            "name = \"src2\"\nkind = \"mssql-source\"\nconnection_string = \"Server=sql;Password={SQL_PASSWORD}\"\nuser = \"u\"\npassword = \"{SQL_PASSWORD}\"\ncapture_instances = []\n"
        ),
    );
    let wrong_type = write_file(dir.path(), "wrong.toml", "name = \"src3\"\nkind = \"mssql-source\"\npassword = 918273645\n");
    let broken = validate(
        &[&broken_source, &wrong_type],
        &[("MSSQL_CDC_CONNECTOR__SRC2__PASSWORD", ENV_PASSWORD)],
        &["--show"],
    );
    let broken_text = text(&broken);
    assert_eq!(broken.status.code(), Some(2), "{broken_text}");
    assert!(broken_text.contains("`connection_string`: holds a password"), "{broken_text}");
    assert!(broken_text.contains("`password`: wrong type"), "{broken_text}");

    for secret in [SQL_PASSWORD, SASL_PASSWORD, PASSTHROUGH_SECRET, ENV_PASSWORD, "918273645"] {
        assert!(!shown.contains(secret), "{secret} leaked:\n{shown}");
        assert!(!broken_text.contains(secret), "{secret} leaked:\n{broken_text}");
    }
}
