//! Test certificate authorities: a CA of one's own and server certificates it signs, written
//! as PEM files for the simulator (`sim serve --tls-cert`) and its clients
//! (`trust_server_certificate_ca`, python-tds's `cafile`).

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, Certificate, CertificateParams, DnType, IsCa, KeyPair};

use crate::error::{Error, Result};
use crate::files::write_file;

fn failed(what: &str) -> impl Fn(rcgen::Error) -> Error + '_ {
    move |error| Error::Failed(format!("{what}: {error}"))
}

/// A certificate authority that lives for one test.
pub struct TestCa {
    cert: Certificate,
    key: KeyPair,
}

/// A server certificate and its key, as PEM files.
#[derive(Clone, Debug)]
pub struct ServerIdentity {
    /// The certificate (`--tls-cert`).
    pub cert: PathBuf,
    /// Its private key (`--tls-key`).
    pub key: PathBuf,
}

impl TestCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> Result<Self> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(failed("CA parameters"))?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().map_err(failed("CA key"))?;
        let cert = params.self_signed(&key).map_err(failed("CA certificate"))?;
        Ok(Self { cert, key })
    }

    /// Writes the CA's certificate to `dir/<file>`; returns its path.
    pub fn write_ca(&self, dir: &Path, file: &str) -> Result<PathBuf> {
        write_file(dir, file, &self.cert.pem())
    }

    /// A server certificate for `hosts` (names or IP addresses) signed by this CA, written as
    /// `dir/<stem>.pem` and `dir/<stem>.key`.
    pub fn server(&self, dir: &Path, stem: &str, hosts: &[&str]) -> Result<ServerIdentity> {
        let names: Vec<String> = hosts.iter().map(|host| (*host).to_owned()).collect();
        let mut params = CertificateParams::new(names).map_err(failed("server parameters"))?;
        params.distinguished_name.push(DnType::CommonName, hosts.first().copied().unwrap_or("localhost"));
        let key = KeyPair::generate().map_err(failed("server key"))?;
        let cert = params.signed_by(&key, &self.cert, &self.key).map_err(failed("server certificate"))?;
        Ok(ServerIdentity { cert: write_file(dir, &format!("{stem}.pem"), &cert.pem())?, key: write_file(dir, &format!("{stem}.key"), &key.serialize_pem())? })
    }
}
