//! The source's connection as production runs it: TLS inside TDS (`encrypt = "required"`, a
//! CA of our own, login-only encryption) and Entra ID token sign-in (a token from a file,
//! from a command, rotated mid-run; expired and untrusted tokens refused), against the
//! simulator served with a certificate and a trusted token key. Independent clients
//! (python-tds, Microsoft's ODBC driver through mssql-python) connect over the same TLS.
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mssql_cdc_sim::client::{password_from_env, BlockingClient};
use mssql_cdc_sim::workload::{create_orders, Workload, WorkloadOptions};
use mssql_cdc_testkit::files::{source_toml_signed_in, worker_toml};
use mssql_cdc_testkit::tls::{ServerIdentity, TestCa};
use support::source::{check_contract, exec, read_all, truth, wait_caught_up};
use support::{spawn_stage, unique, write_file, SimServer, StageProcess, TestBroker};

/// A CA, a server certificate it signs for 127.0.0.1 and localhost, and its PEM file.
struct Pki {
    ca: PathBuf,
    server: ServerIdentity,
}

fn pki(dir: &Path) -> Pki {
    let ca = TestCa::new("mssql-cdc test CA").unwrap();
    Pki { ca: ca.write_ca(dir, "ca.pem").unwrap(), server: ca.server(dir, "sim", &["127.0.0.1", "localhost"]).unwrap() }
}

/// The simulator presenting `pki`'s certificate with `encrypt` (`off` or `required`), and
/// `extra` flags.
fn sim_with_tls(pki: &Pki, encrypt: &str, extra: &[&str]) -> SimServer {
    let (cert, key) = (pki.server.cert.display().to_string(), pki.server.key.display().to_string());
    let mut flags = vec!["--tls-cert", cert.as_str(), "--tls-key", key.as_str(), "--encrypt", encrypt];
    flags.extend_from_slice(extra);
    SimServer::start(&flags).unwrap()
}

/// Creates dbo.orders with CDC and runs `changes` changes of the orders workload.
fn orders(sim: &SimServer, changes: u64) {
    let config = sim.client_config();
    std::thread::spawn(move || {
        let mut client = BlockingClient::connect(&config).expect("login");
        create_orders(&mut client).expect("set up dbo.orders");
        let options = WorkloadOptions { changes, rate: 0, max_transaction_size: 20, seed: 7, ..WorkloadOptions::default() };
        Workload::new(options, Vec::new()).run(&mut client).expect("workload");
    })
    .join()
    .unwrap();
}

/// Inserts orders `from..from + count`, five to a transaction.
async fn more_orders(sim: &SimServer, from: i64, count: i64) {
    for first in (from..from + count).step_by(5) {
        let inserts: Vec<String> = (first..(first + 5).min(from + count))
            .map(|id| format!("INSERT INTO dbo.orders (order_id, customer_id, status, amount, currency, created_at, is_priority) VALUES ({id}, 1, 'new', 1.00, 'EUR', '2026-01-01T00:00:00', 0)"))
            .collect();
        exec(&sim.client_config(), &format!("BEGIN TRANSACTION; {}; COMMIT", inserts.join("; "))).await;
    }
}

/// Worker and source files for `sim` with the sign-in and TLS lines `login`.
fn source_files(dir: &Path, broker: &TestBroker, sim: &SimServer, prefix: &str, login: &str) -> (PathBuf, PathBuf) {
    let worker = write_file(dir, &format!("{prefix}-worker.toml"), &worker_toml(&broker.bootstrap, ""));
    let connector = write_file(dir, &format!("{prefix}-source.toml"), &source_toml_signed_in("orders-source", sim.address.port(), prefix, login, "topic_partitions = 2"));
    (worker, connector)
}

/// The sign-in lines of the `sa` login over TLS, trusting `ca`.
fn sql_login_over_tls(encrypt: &str, ca: &Path) -> String {
    format!(
        "user = \"sa\"\npassword = {{ env = \"{}\" }}\nencrypt = \"{encrypt}\"\ntrust_server_certificate_ca = \"{}\"\n",
        mssql_cdc_sim::client::PASSWORD_ENV,
        ca.display()
    )
}

/// Waits for the stage to exit with 1 and returns its log.
fn failure(stage: &mut StageProcess) -> String {
    let status = stage.process().wait(Duration::from_secs(90)).unwrap_or_else(|| panic!("the stage stops; log:\n{}", stage.log()));
    assert_eq!(status.code(), Some(1), "exit 1; log:\n{}", stage.log());
    stage.log()
}

/// Streams until caught up, stops cleanly, and checks the log contract against the change
/// table; returns the source's log.
async fn caught_up_and_checked(broker: &TestBroker, sim: &SimServer, prefix: &str, source: &mut StageProcess) -> String {
    let topic = format!("{prefix}.sales.dbo.orders");
    let records = wait_caught_up(&broker.bootstrap, &topic, &sim.client_config(), source, Duration::from_secs(120)).await;
    let log = source.log();
    assert!(source.stop().is_some_and(|status| status.success()), "clean stop; log:\n{log}");
    let data = read_all(&broker.bootstrap, &topic);
    check_contract(&records, &data, &truth(&sim.client_config()).await, None);
    log
}

/// Invariant: with `encrypt = "required"` and the CA that signed the server's certificate, the
/// source streams every change over TLS from a server that forces encryption (no connection of
/// it can be in the clear there), and tiberius never warns of an unencrypted connection.
#[tokio::test(flavor = "multi_thread")]
async fn the_source_streams_over_tls_from_a_server_that_forces_encryption() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let broker = TestBroker::start().unwrap();
    let sim = sim_with_tls(&pki, "required", &[]);
    orders(&sim, 1500);
    let prefix = unique("tls");
    let (worker, connector) = source_files(dir.path(), &broker, &sim, &prefix, &sql_login_over_tls("required", &pki.ca));
    let mut source = spawn_stage(&worker, &connector, &[]);
    caught_up_and_checked(&broker, &sim, &prefix, &mut source).await;
}

/// Invariant: `encrypt = "off"` encrypts the login packet only (the server offers TLS without
/// forcing it), and the stream works over the connection that continues in the clear.
#[tokio::test(flavor = "multi_thread")]
async fn login_only_encryption_signs_in_over_tls_then_streams_in_the_clear() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let broker = TestBroker::start().unwrap();
    let sim = sim_with_tls(&pki, "off", &[]);
    orders(&sim, 500);
    let prefix = unique("login-only");
    let (worker, connector) = source_files(dir.path(), &broker, &sim, &prefix, &sql_login_over_tls("off", &pki.ca));
    let mut source = spawn_stage(&worker, &connector, &[("RUST_LOG", "info,tiberius=warn")]);
    let log = caught_up_and_checked(&broker, &sim, &prefix, &mut source).await;
    assert!(log.contains("Turning TLS off after a login"), "tiberius reports the login-only encryption: {log}");
}

/// Invariant: a certificate signed by another CA stops the source at once (not retried for
/// `retry_timeout_ms`) with an error naming the reason and `trust_server_certificate_ca`; a
/// server that offers no encryption stops `encrypt = "required"` naming `encrypt`.
#[tokio::test(flavor = "multi_thread")]
async fn certificate_and_encryption_failures_stop_the_source_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let other = TestCa::new("another CA").unwrap().write_ca(dir.path(), "other-ca.pem").unwrap();
    let broker = TestBroker::start().unwrap();
    let sim = sim_with_tls(&pki, "required", &[]);
    orders(&sim, 10);
    let prefix = unique("other-ca");
    let (worker, connector) = source_files(dir.path(), &broker, &sim, &prefix, &sql_login_over_tls("required", &other));
    let started = Instant::now();
    let log = failure(&mut spawn_stage(&worker, &connector, &[]));
    assert!(log.contains("the server's certificate was refused") && log.contains("UnknownIssuer") && log.contains("trust_server_certificate_ca"), "{log}");
    assert!(started.elapsed() < Duration::from_secs(60), "not retried as transient: {:?}", started.elapsed());

    let plain = SimServer::start(&[]).unwrap();
    orders(&plain, 10);
    let prefix = unique("no-tls");
    let (worker, connector) = source_files(dir.path(), &broker, &plain, &prefix, &sql_login_over_tls("required", &pki.ca));
    let log = failure(&mut spawn_stage(&worker, &connector, &[]));
    assert!(log.contains("does not offer the encryption `encrypt` asks for"), "{log}");
}

/// Invariant: independent clients speak the simulator's TLS: python-tds verifying the
/// certificate against the CA (whole connection, and login-only), and Microsoft's ODBC driver
/// through mssql-python with `Encrypt=yes;TrustServerCertificate=no`, which accepts the
/// certificate for the name it holds and refuses it for another.
#[tokio::test(flavor = "multi_thread")]
async fn python_tds_and_the_odbc_driver_connect_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let forced = sim_with_tls(&pki, "required", &[]);
    let offered = sim_with_tls(&pki, "off", &[]);
    let script = r#"
import sys, os
forced, offered, password, ca = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
import pytds
with pytds.connect(server="127.0.0.1", port=forced, user="sa", password=password, database="sales", cafile=ca, validate_host=False, autocommit=True) as conn:
    cur = conn.cursor(); cur.execute("SELECT 40 + 2"); print("pytds tls", cur.fetchone()[0])
with pytds.connect(server="127.0.0.1", port=offered, user="sa", password=password, database="sales", cafile=ca, enc_login_only=True, validate_host=False, autocommit=True) as conn:
    cur = conn.cursor(); cur.execute("SELECT 'login-only'"); print("pytds", cur.fetchone()[0])
# Microsoft's ODBC driver checks the chain against OpenSSL's default CA file (our CA here) and
# the name against HostNameInCertificate (it does not match IP addresses in the certificate).
os.environ["SSL_CERT_FILE"] = ca
import mssql_python
base = f"Server=tcp:127.0.0.1,{forced};Database=sales;UID=sa;PWD={password};Encrypt=yes;TrustServerCertificate=no"
conn = mssql_python.connect(base + ";HostNameInCertificate=localhost")
cur = conn.cursor(); cur.execute("SELECT 6 * 7"); print("odbc tls", cur.fetchone()[0])
conn.close()
try:
    mssql_python.connect(base + ";HostNameInCertificate=another.host")
    print("odbc accepted a certificate for another name")
except Exception as error:
    print("odbc refused:", "certificate verify failed" in str(error))
"#;
    let output = support::run_python(script, &[&forced.address.port().to_string(), &offered.address.port().to_string(), &password_from_env(), &pki.ca.display().to_string()]);
    assert!(output.contains("pytds tls 42") && output.contains("pytds login-only") && output.contains("odbc tls 42"), "{output}");
    assert!(output.contains("odbc refused: True"), "the ODBC driver checks the certificate: {output}");
}

/// A signing key in `dir/<name>` and a token it signs that expires in `seconds`, minted by
/// `mssql-cdc sim token`.
fn key(dir: &Path, name: &str, secret: &str) -> PathBuf {
    write_file(dir, name, secret)
}

fn mint(key: &Path, seconds: i64) -> String {
    let output = std::process::Command::new(support::bin()).args(["sim", "token", "--key"]).arg(key).args(["--expires-in", &seconds.to_string()]).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// The simulator forcing TLS and trusting tokens signed with the key in `dir/token.key`.
fn token_server(dir: &Path) -> (Pki, PathBuf, SimServer) {
    let pki = pki(dir);
    let key = key(dir, "token.key", "simulator-trusts-this-key");
    let key_flag = key.display().to_string();
    let sim = sim_with_tls(&pki, "required", &["--trust-token-key", &key_flag]);
    (pki, key, sim)
}

/// The sign-in lines of a token source over TLS.
fn token_login(ca: &Path, lines: &str) -> String {
    format!("encrypt = \"required\"\ntrust_server_certificate_ca = \"{}\"\n{lines}\n", ca.display())
}

/// Invariant: a source signing in with a token from a file reads the file again for every
/// new connection: after the file is rotated and the first token has expired, connections
/// the server drops come back with the new token and the stream goes on without a gap; no
/// token reaches the log.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_from_a_file_signs_in_and_survives_its_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let (pki, key, sim) = token_server(dir.path());
    let broker = TestBroker::start().unwrap();
    orders(&sim, 300);
    let first = mint(&key, 25);
    let minted = Instant::now();
    let token_file = write_file(dir.path(), "sql-token", &format!("{first}\n"));
    let prefix = unique("token-file");
    let login = token_login(&pki.ca, &format!("authentication = \"access_token\"\naccess_token = {{ file = \"{}\" }}", token_file.display()));
    let (worker, connector) = source_files(dir.path(), &broker, &sim, &prefix, &login);
    let mut source = spawn_stage(&worker, &connector, &[]);
    let topic = format!("{prefix}.sales.dbo.orders");
    wait_caught_up(&broker.bootstrap, &topic, &sim.client_config(), &source, Duration::from_secs(60)).await;

    let second = mint(&key, 3600);
    write_file(dir.path(), "sql-token", &format!("{second}\n"));
    std::thread::sleep(Duration::from_secs(26).saturating_sub(minted.elapsed()));
    // The first token has expired: the server drops the source's next statements' connections.
    exec(&sim.client_config(), "EXEC sim.inject_fault @kind = 'disconnect', @count = 3").await;
    // The source polls every 100 ms: its statements take the three faults (and reconnect)
    // well before this test's own inserts run.
    tokio::time::sleep(Duration::from_secs(5)).await;
    exec(&sim.client_config(), "EXEC sim.clear_faults").await;
    more_orders(&sim, 1_000_000, 60).await;
    let log = caught_up_and_checked(&broker, &sim, &prefix, &mut source).await;
    assert!(log.contains("SQL Server reachable again"), "the source reconnected after the first token expired: {log}");
    assert!(!log.contains(&first) && !log.contains(&second), "no token in the log");
}

/// Invariant: `token_command` runs a command for its token (here the simulator's own minting
/// command), and the source streams with it.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_from_a_command_signs_in() {
    let dir = tempfile::tempdir().unwrap();
    let (pki, key, sim) = token_server(dir.path());
    let broker = TestBroker::start().unwrap();
    orders(&sim, 300);
    let prefix = unique("token-command");
    let command = format!("token_command = [\"{}\", \"sim\", \"token\", \"--key\", \"{}\", \"--expires-in\", \"3600\"]", support::bin().display(), key.display());
    let (worker, connector) = source_files(dir.path(), &broker, &sim, &prefix, &token_login(&pki.ca, &format!("authentication = \"token_command\"\n{command}")));
    let mut source = spawn_stage(&worker, &connector, &[]);
    let log = caught_up_and_checked(&broker, &sim, &prefix, &mut source).await;
    assert!(log.contains("access token fetched"), "{log}");
}

/// Invariant: a token the server does not trust is refused with 18456 and the reason, and
/// the source stops naming it; an expired token in the file is not sent at all: the source
/// waits for its rotation within `retry_timeout_ms`, then stops naming the expiry; the server
/// refuses an expired token by name too (tiberius signing in with it directly); no token is
/// ever logged.
#[tokio::test(flavor = "multi_thread")]
async fn expired_and_untrusted_tokens_are_refused_by_name_and_never_logged() {
    let dir = tempfile::tempdir().unwrap();
    let (pki, trusted, sim) = token_server(dir.path());
    let stranger = key(dir.path(), "other.key", "a-key-nobody-trusts");
    let broker = TestBroker::start().unwrap();
    orders(&sim, 10);
    let cases = [
        ("untrusted", mint(&stranger, 3600), "Login failed for user '<token-identified principal>'. the access token's signature is not trusted"),
        ("expired", mint(&trusted, -60), "access_token: the token expired at"),
    ];
    for (name, token, reason) in cases {
        let token_file = write_file(dir.path(), &format!("{name}-token"), &token);
        let prefix = unique(name);
        let login = token_login(&pki.ca, &format!("authentication = \"access_token\"\naccess_token = {{ file = \"{}\" }}\nretry_timeout_ms = 3000", token_file.display()));
        let (worker, connector) = source_files(dir.path(), &broker, &sim, &prefix, &login);
        let log = failure(&mut spawn_stage(&worker, &connector, &[]));
        assert!(log.contains(reason), "{name}: {log}");
        assert!(!log.contains(&token), "{name}: the token is not logged");
    }

    let mut config = tiberius::Config::new();
    config.host("127.0.0.1");
    config.port(sim.address.port());
    config.encryption(tiberius::EncryptionLevel::Required);
    config.trust_cert_ca(pki.ca.display().to_string());
    config.authentication(tiberius::AuthMethod::aad_token(mint(&trusted, -60)));
    let tcp = tokio::net::TcpStream::connect(sim.address).await.unwrap();
    let refused = tiberius::Client::connect(config, tokio_util::compat::TokioAsyncWriteCompatExt::compat_write(tcp)).await.expect_err("an expired token is refused");
    let text = refused.to_string();
    assert!(text.contains("18456") || text.contains("Login failed"), "{text}");
    assert!(text.contains("the access token expired at"), "{text}");
}
