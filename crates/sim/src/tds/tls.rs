//! TLS inside TDS: the server's side of the encryption a client asks for in PRELOGIN.
//!
//! TDS 7.x negotiates encryption in the PRELOGIN exchange, then runs the TLS handshake with
//! its records carried as the payload of PRELOGIN (0x12) packets. Once the handshake is done,
//! TLS records flow bare on the socket and carry the TDS packets inside them. When both sides
//! say `ENCRYPT_OFF`, only the LOGIN7 message is encrypted: the server reads it through TLS,
//! then both sides drop TLS and go on in the clear (login-only encryption).
//!
//! The simulator speaks TLS 1.2 here, as SQL Server does for TDS 7.x (TLS 1.3 comes with
//! TDS 8.0's strict mode, where TLS starts before PRELOGIN).

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::TlsAcceptor;

/// PRELOGIN's ENCRYPTION values.
pub mod encryption {
    /// Encryption available but off: the login packet only.
    pub const OFF: u8 = 0x00;
    /// Encryption on.
    pub const ON: u8 = 0x01;
    /// Encryption not available.
    pub const NOT_SUP: u8 = 0x02;
    /// Encryption required.
    pub const REQ: u8 = 0x03;
}

/// What the server offers (`sim serve --encrypt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ServerEncryption {
    /// Encryption available: the login packet only for clients that ask for `off`, the whole
    /// connection for clients that ask for `on` or `required`, none for clients without TLS.
    Off,
    /// Encryption forced (SQL Server's "Force Encryption"): every connection is encrypted
    /// whole, whatever the client asked for.
    Required,
}

/// How a connection goes on after PRELOGIN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Negotiated {
    /// In the clear.
    None,
    /// TLS for LOGIN7 only.
    LoginOnly,
    /// TLS for the whole connection.
    Full,
}

/// The server's answer to the client's ENCRYPTION option (`None` when the client sent none),
/// and what follows, per the PRELOGIN rules of MS-TDS. Without a certificate the server
/// answers `NOT_SUP` and stays in the clear; a client that requires encryption then hangs up.
pub fn negotiate(client: Option<u8>, server: Option<ServerEncryption>) -> (u8, Negotiated) {
    let client = client.map_or(encryption::NOT_SUP, |value| value & 0x0F);
    match (server, client) {
        (None, _) => (encryption::NOT_SUP, Negotiated::None),
        (Some(ServerEncryption::Off), encryption::OFF) => (encryption::OFF, Negotiated::LoginOnly),
        (Some(ServerEncryption::Off), encryption::NOT_SUP) => (encryption::NOT_SUP, Negotiated::None),
        (Some(ServerEncryption::Off), _) => (encryption::ON, Negotiated::Full),
        (Some(ServerEncryption::Required), _) => (encryption::REQ, Negotiated::Full),
    }
}

/// The certificate the simulator presents and what it offers.
#[derive(Clone)]
pub struct TlsServer {
    acceptor: TlsAcceptor,
    /// What the server offers.
    pub mode: ServerEncryption,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer").field("mode", &self.mode).finish_non_exhaustive()
    }
}

impl TlsServer {
    /// Loads a PEM certificate chain and its private key.
    pub fn load(cert: &Path, key: &Path, mode: ServerEncryption) -> Result<Self, String> {
        let read = |path: &Path| std::fs::read(path).map_err(|error| format!("cannot read `{}`: {error}", path.display()));
        let certs = rustls_pemfile::certs(&mut read(cert)?.as_slice())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| format!("`{}` is not a PEM certificate chain: {error}", cert.display()))?;
        if certs.is_empty() {
            return Err(format!("`{}` holds no certificate", cert.display()));
        }
        let private = rustls_pemfile::private_key(&mut read(key)?.as_slice())
            .map_err(|error| format!("`{}` is not a PEM private key: {error}", key.display()))?
            .ok_or_else(|| format!("`{}` holds no private key", key.display()))?;
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS12])
            .map_err(|error| error.to_string())?
            .with_no_client_auth()
            .with_single_cert(certs, private)
            .map_err(|error| format!("certificate and key do not form a server identity: {error}"))?;
        // No session resumption: in an abbreviated handshake the server's Finished comes first
        // and the client's LOGIN7 follows its own Finished at once, bare, while the framing is
        // still on. Every connection gets a full handshake, as the framing expects.
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        Ok(Self { acceptor: TlsAcceptor::from(Arc::new(config)), mode })
    }

    /// Runs the server's side of the handshake, its records inside PRELOGIN packets; the
    /// stream returned carries TLS records bare.
    pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(&self, stream: S) -> std::io::Result<tokio_rustls::server::TlsStream<PreloginFramed<S>>> {
        let mut tls = self.acceptor.accept(PreloginFramed::new(stream)).await?;
        tls.get_mut().0.handshake_done();
        Ok(tls)
    }
}

/// The PRELOGIN packet type that carries handshake records.
const PRELOGIN: u8 = 0x12;
/// A TDS packet header's length.
const HEADER: usize = 8;
/// The largest handshake payload sent in one packet.
const CHUNK: usize = 4096 - HEADER;

/// A stream that, during the TLS handshake, takes the TDS packet headers off what it reads
/// and wraps what it writes in PRELOGIN packets; after it, passes bytes through.
pub struct PreloginFramed<S> {
    inner: S,
    handshake: bool,
    header: [u8; HEADER],
    header_read: usize,
    remaining: usize,
    pending: Vec<u8>,
    out: Vec<u8>,
    out_written: usize,
}

impl<S> PreloginFramed<S> {
    fn new(inner: S) -> Self {
        Self { inner, handshake: true, header: [0; HEADER], header_read: 0, remaining: 0, pending: Vec::new(), out: Vec::new(), out_written: 0 }
    }

    fn handshake_done(&mut self) {
        self.handshake = false;
    }

    /// The socket underneath (for login-only encryption, once LOGIN7 is read).
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// Frames what is pending as PRELOGIN packets into `out`.
    fn frame_pending(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        let pieces: Vec<&[u8]> = pending.chunks(CHUNK).collect();
        let last = pieces.len().saturating_sub(1);
        for (index, piece) in pieces.into_iter().enumerate() {
            self.out.push(PRELOGIN);
            self.out.push(u8::from(index == last));
            self.out.extend_from_slice(&u16::try_from(piece.len() + HEADER).unwrap_or(u16::MAX).to_be_bytes());
            self.out.extend_from_slice(&[0, 0, (index as u8).wrapping_add(1), 0]);
            self.out.extend_from_slice(piece);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for PreloginFramed<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.handshake {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        while this.remaining == 0 {
            while this.header_read < HEADER {
                let mut header = ReadBuf::new(&mut this.header[this.header_read..]);
                ready!(Pin::new(&mut this.inner).poll_read(cx, &mut header))?;
                let read = header.filled().len();
                if read == 0 {
                    return Poll::Ready(Ok(()));
                }
                this.header_read += read;
            }
            this.header_read = 0;
            if this.header[0] != PRELOGIN {
                let kind = this.header[0];
                return Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("packet type 0x{kind:02X} during the TLS handshake (expected PRELOGIN)"))));
            }
            let length = usize::from(u16::from_be_bytes([this.header[2], this.header[3]]));
            this.remaining = length.checked_sub(HEADER).ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "TDS packet shorter than its header"))?;
        }
        let want = this.remaining.min(buf.remaining());
        let mut limited = ReadBuf::new(buf.initialize_unfilled_to(want));
        ready!(Pin::new(&mut this.inner).poll_read(cx, &mut limited))?;
        let read = limited.filled().len();
        buf.advance(read);
        this.remaining -= read;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for PreloginFramed<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if !this.handshake && this.out.is_empty() && this.pending.is_empty() {
            return Pin::new(&mut this.inner).poll_write(cx, data);
        }
        if !this.handshake {
            ready!(Pin::new(&mut *this).poll_flush(cx))?;
            return Pin::new(&mut this.inner).poll_write(cx, data);
        }
        this.pending.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.pending.is_empty() {
            this.frame_pending();
        }
        while this.out_written < this.out.len() {
            let written = ready!(Pin::new(&mut this.inner).poll_write(cx, &this.out[this.out_written..]))?;
            if written == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            this.out_written += written;
        }
        this.out.clear();
        this.out_written = 0;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        ready!(Pin::new(&mut *this).poll_flush(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_the_prelogin_rules() {
        use encryption::*;
        let off = Some(ServerEncryption::Off);
        let required = Some(ServerEncryption::Required);
        // No certificate: in the clear, whatever was asked.
        assert_eq!(negotiate(Some(REQ), None), (NOT_SUP, Negotiated::None));
        // Available: login-only for OFF, whole for ON/REQ, none for NOT_SUP.
        assert_eq!(negotiate(Some(OFF), off), (OFF, Negotiated::LoginOnly));
        assert_eq!(negotiate(Some(ON), off), (ON, Negotiated::Full));
        assert_eq!(negotiate(Some(REQ), off), (ON, Negotiated::Full));
        assert_eq!(negotiate(Some(NOT_SUP), off), (NOT_SUP, Negotiated::None));
        // Forced: always whole.
        assert_eq!(negotiate(Some(OFF), required), (REQ, Negotiated::Full));
        assert_eq!(negotiate(None, required), (REQ, Negotiated::Full));
    }

    #[tokio::test]
    async fn handshake_writes_are_framed_as_prelogin_packets_and_reads_unframed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (near, mut far) = tokio::io::duplex(64 * 1024);
        let mut framed = PreloginFramed::new(near);
        let payload: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        framed.write_all(&payload).await.unwrap();
        framed.flush().await.unwrap();
        let mut wire = vec![0u8; payload.len() + 2 * HEADER];
        far.read_exact(&mut wire).await.unwrap();
        // Two packets: 4088 bytes without end-of-message, then the rest with it.
        assert_eq!((wire[0], wire[1], u16::from_be_bytes([wire[2], wire[3]])), (PRELOGIN, 0, 4096));
        let second = &wire[4096..];
        assert_eq!((second[0], second[1], usize::from(u16::from_be_bytes([second[2], second[3]]))), (PRELOGIN, 1, 5000 - CHUNK + HEADER));
        assert_eq!([&wire[HEADER..4096], &second[HEADER..]].concat(), payload);
        // Reads drop the headers of what the client sends.
        far.write_all(&[PRELOGIN, 1, 0, 11, 0, 0, 1, 0, b'a', b'b', b'c']).await.unwrap();
        let mut read = [0u8; 3];
        framed.read_exact(&mut read).await.unwrap();
        assert_eq!(&read, b"abc");
        // After the handshake, bytes pass through untouched.
        framed.handshake_done();
        far.write_all(b"raw").await.unwrap();
        framed.read_exact(&mut read).await.unwrap();
        assert_eq!(&read, b"raw");
    }

    #[tokio::test]
    async fn another_packet_type_during_the_handshake_is_refused() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (near, mut far) = tokio::io::duplex(1024);
        let mut framed = PreloginFramed::new(near);
        far.write_all(&[0x10, 1, 0, 9, 0, 0, 1, 0, 0]).await.unwrap();
        let mut read = [0u8; 1];
        let error = framed.read_exact(&mut read).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
    }
}
