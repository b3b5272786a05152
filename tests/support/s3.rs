//! An S3-protocol object store for tests: moto's server (`python -m moto.server`, installed in
//! the checkers' virtualenv by `scripts/test.sh`) on a free port, with one bucket.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::python;

/// A moto S3 server process, killed on drop.
pub struct S3Server {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    /// The bucket made at start.
    pub bucket: String,
}

impl S3Server {
    /// Starts the server and creates `bucket`.
    pub fn start(bucket: &str) -> Self {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(python())
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto's S3 server (pip install 'moto[server]')");
        let server = Self { child, endpoint: format!("http://127.0.0.1:{port}"), bucket: bucket.to_owned() };
        let deadline = Instant::now() + Duration::from_secs(60);
        // Creating the bucket is also the readiness probe.
        loop {
            match put_bucket(port, bucket) {
                Ok(status) if status.starts_with("HTTP/1.1 200") || status.starts_with("HTTP/1.0 200") => return server,
                Ok(status) => panic!("moto refused bucket {bucket}: {status}"),
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
                Err(e) => panic!("moto did not start: {e}"),
            }
        }
    }

    /// delta-rs storage options for this server, as `KEY = "value"` TOML lines.
    pub fn storage_toml(&self) -> String {
        self.options().iter().map(|(k, v)| format!("{k} = \"{v}\"\n")).collect()
    }

    /// delta-rs storage options for this server.
    pub fn options(&self) -> Vec<(&'static str, String)> {
        self.options_at(&self.endpoint)
    }

    /// delta-rs storage options for this server reached at `endpoint` (a proxy in front).
    pub fn options_at(&self, endpoint: &str) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", endpoint.to_owned()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID", "test-key".into()),
            ("AWS_SECRET_ACCESS_KEY", "test-secret-value".into()),
        ]
    }
}

impl S3Server {
    /// The address it listens on.
    pub fn address(&self) -> std::net::SocketAddr {
        self.endpoint.trim_start_matches("http://").parse().unwrap()
    }

    /// SIGSTOP: connections are accepted by the kernel but never answered, as a hung server.
    pub fn freeze(&self) {
        signal(&self.child, "-STOP");
    }

    /// SIGCONT after [`Self::freeze`].
    pub fn thaw(&self) {
        signal(&self.child, "-CONT");
    }
}

fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
    assert!(status.success(), "kill {signal} {}", child.id());
}

/// `PUT /<bucket>` (an anonymous CreateBucket); returns the status line.
fn put_bucket(port: u16, bucket: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    write!(stream, "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response.lines().next().unwrap_or_default().to_owned())
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.child.id().to_string()]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
