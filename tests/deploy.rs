//! The deployment files check out with the tools that read them: the compose file against
//! the Compose specification (`docker-compose config`), Prometheus's configuration and alert
//! rules (`promtool`), the Kubernetes manifests against the API schemas (Python
//! `kubernetes-validate`), and the worker and connector files of both with `mssql-cdc
//! validate`. `scripts/test.sh` installs the tools; a missing one fails the test. That the
//! dashboard and the rules name only metrics the stages export is checked against live
//! scrapes in `pipeline::the_whole_pipeline_as_processes_matches_the_simulator`.
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::path::Path;
use std::process::Command;

/// Runs a tool to its end; panics with its output unless it succeeds.
fn check(program: &str, args: &[&str], dir: &Path) -> String {
    let output = Command::new(program).args(args).current_dir(dir).output().unwrap_or_else(|error| panic!("`{program}` could not run ({error}); scripts/test.sh installs it"));
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{program} {args:?} failed:\n{text}");
    text
}

/// The compose file is valid Compose for both profiles, and names every image by version.
#[test]
fn the_compose_file_follows_the_compose_specification() {
    let compose = support::repo().join("compose");
    for profiles in ["sqlserver", "sim"] {
        let output = Command::new("docker-compose").args(["-f", "compose.yaml", "config"]).env("COMPOSE_PROFILES", profiles).current_dir(&compose).output();
        let output = output.unwrap_or_else(|error| panic!("docker-compose could not run ({error}); scripts/test.sh installs it"));
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "docker-compose config ({profiles}):\n{text}{}", String::from_utf8_lossy(&output.stderr));
        let images: Vec<&str> = text.lines().filter_map(|l| l.trim().strip_prefix("image: ")).collect();
        assert!(images.len() >= 8, "{images:?}");
        for image in images {
            let tag = image.rsplit_once(':').map(|(_, tag)| tag).unwrap_or_default();
            assert!(!tag.is_empty() && tag != "latest", "image `{image}` is not pinned to a version");
        }
    }
}

/// Prometheus accepts its configuration and the alert rules, and every rule has a runbook
/// line in docs/operations.md.
#[test]
fn prometheus_accepts_the_configuration_and_the_alert_rules() {
    let dir = support::repo().join("compose/prometheus");
    check("promtool", &["check", "config", "prometheus.yml"], &dir);
    let rules = check("promtool", &["check", "rules", "alerts.yml"], &dir);
    assert!(rules.contains("SUCCESS"), "{rules}");
    let operations = std::fs::read_to_string(support::repo().join("docs/operations.md")).unwrap();
    let alerts = std::fs::read_to_string(dir.join("alerts.yml")).unwrap();
    for line in alerts.lines() {
        if let Some(anchor) = line.trim().strip_prefix("runbook: \"docs/operations.md#").and_then(|r| r.strip_suffix('"')) {
            assert!(operations.to_lowercase().contains(&format!("### {}\n", anchor.replace('-', " "))), "no runbook section `{anchor}` in docs/operations.md");
        }
    }
}

/// The manifests validate against the Kubernetes API schemas (the ServiceMonitor, a custom
/// resource, by its required fields).
#[test]
fn the_kubernetes_manifests_validate_against_the_api_schemas() {
    let script = r#"
import sys, yaml, kubernetes_validate
done = 0
for path in sys.argv[1:]:
    for doc in yaml.safe_load_all(open(path)):
        if not doc:
            continue
        if doc["kind"] == "ServiceMonitor":
            assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["spec"]["endpoints"] and doc["spec"]["selector"], path
        else:
            kubernetes_validate.validate(doc, "1.30", strict=True)
        done += 1
print(done)
"#;
    let dir = support::repo().join("deploy/kubernetes");
    let mut files: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "yaml")).map(|p| p.display().to_string()).collect();
    files.sort();
    let args: Vec<&str> = files.iter().map(String::as_str).collect();
    let count: usize = support::run_python(script, &args).trim().parse().unwrap();
    assert!(count >= 10, "every manifest read ({count})");
}

/// The worker and connector files of the compose stack and of the manifests pass `validate`.
#[test]
fn the_deployments_connector_files_validate() {
    let compose = support::repo().join("compose");
    let files = ["worker.toml", "connectors/source.toml", "connectors/bronze.toml", "connectors/silver.toml"];
    let output = Command::new(support::bin()).arg("validate").args(files.iter().map(|f| compose.join(f))).output().unwrap();
    assert!(output.status.success(), "{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    let script = r#"
import sys, os, yaml
config = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "ConfigMap")
for name, text in config["data"].items():
    open(os.path.join(sys.argv[2], name), "w").write(text)
print(len(config["data"]))
"#;
    let dir = tempfile::tempdir().unwrap();
    let manifest = support::repo().join("deploy/kubernetes/config.yaml");
    let count = support::run_python(script, &[manifest.to_str().unwrap(), dir.path().to_str().unwrap()]);
    assert_eq!(count.trim(), "4");
    let names = ["worker.toml", "source.toml", "bronze.toml", "silver.toml"];
    let output = Command::new(support::bin()).arg("validate").args(names.iter().map(|f| dir.path().join(f))).output().unwrap();
    assert!(output.status.success(), "{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
}

/// The metric names the dashboard's and the alert rules' PromQL use (`mssql_cdc_*`, the
/// summaries' `_count`/`_sum` suffixes and `quantile` series kept as their metric).
pub fn monitored_metrics() -> Vec<String> {
    let compose = support::repo().join("compose");
    let mut text = std::fs::read_to_string(compose.join("grafana/dashboards/mssql-cdc.json")).unwrap();
    text.push_str(&std::fs::read_to_string(compose.join("prometheus/alerts.yml")).unwrap());
    let mut names: Vec<String> = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("mssql_cdc_") {
        let name: String = rest[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        rest = &rest[at + name.len()..];
        let name = name.strip_suffix("_count").or_else(|| name.strip_suffix("_sum")).unwrap_or(&name).to_owned();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names.sort();
    names
}

/// Every metric the dashboard and the rules name is declared in the telemetry module.
#[test]
fn the_dashboard_and_the_rules_name_declared_metrics() {
    let names = monitored_metrics();
    assert!(names.len() >= 12, "{names:?}");
    let unknown: Vec<&String> = names.iter().filter(|n| !mssql_cdc_core::telemetry::metrics::ALL.contains(&n.as_str())).collect();
    assert!(unknown.is_empty(), "metrics no stage declares: {unknown:?}");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(support::repo().join("compose/grafana/dashboards/mssql-cdc.json")).unwrap()).unwrap();
    let titles: Vec<&str> = dashboard["panels"].as_array().unwrap().iter().filter_map(|p| p["title"].as_str()).collect();
    for wanted in ["Rows/s", "capture lag", "behind", "Verdict age", "Retention headroom", "Retries", "Dead-lettered"] {
        assert!(titles.iter().any(|t| t.to_lowercase().contains(&wanted.to_lowercase())), "a `{wanted}` panel: {titles:?}");
    }
}
