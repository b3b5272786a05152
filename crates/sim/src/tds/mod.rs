//! The simulator on the wire: a TDS 7.4 server that tiberius, python-tds and FreeTDS connect
//! to (`mssql-cdc sim serve`).
//!
//! Without a certificate it answers PRELOGIN with encryption "not supported" (clients must be
//! configured to not encrypt: tiberius `EncryptionLevel::NotSupported`); with one
//! ([`WireSecurity::tls`]) it negotiates encryption as SQL Server does and speaks TLS inside
//! TDS, for the whole connection or the login packet only ([`tls`]). It authenticates LOGIN7
//! against the configured SQL logins, or by an access token it trusts ([`token`]; 18456
//! otherwise), and executes SQL batches and RPC `sp_executesql` calls with typed parameters
//! against the shared [`Simulator`]. State lives in the serving process: clients connect,
//! disconnect and can be killed without loss.

pub mod login;
pub mod tls;
pub mod token;
pub mod tokens;
pub mod wire;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use self::tokens::{DoneKind, Response, DONE_ATTN, DONE_COUNT, DONE_ERROR, DONE_MORE};
use self::wire::Reader;
use super::error::SqlError;
use super::sql::{BatchOutcome, Output, Session};
use super::types::SqlType;
use super::value::Value;
use super::Simulator;

const SQL_BATCH: u8 = 0x01;
const RPC: u8 = 0x03;
const ATTENTION: u8 = 0x06;
const TRANSACTION_MANAGER: u8 = 0x0E;
const LOGIN7: u8 = 0x10;
const PRELOGIN: u8 = 0x12;
const REPLY: u8 = 0x04;
/// The server name ERROR tokens carry.
const SERVER_NAME: &str = "mssql-cdc-sim";
/// The largest request accepted before login (PRELOGIN, LOGIN7), bytes.
const MAX_LOGIN_MESSAGE: usize = 64 * 1024;
/// The largest request accepted after login, bytes.
const MAX_MESSAGE: usize = 256 * 1024 * 1024;

/// Errors of the TDS server itself (not SQL errors, which go to the client).
#[derive(Debug, thiserror::Error)]
pub enum TdsError {
    /// The listener could not be bound.
    #[error("sim serve: cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// How the served simulator secures its connections and whom it lets in besides SQL logins.
#[derive(Clone, Default)]
pub struct WireSecurity {
    /// The certificate it presents and the encryption it offers; `None`: encryption not
    /// supported.
    pub tls: Option<tls::TlsServer>,
    /// The key whose signed access tokens it trusts for federated sign-in; `None`: token
    /// sign-in is refused.
    pub token_key: Option<Arc<[u8]>>,
}

impl std::fmt::Debug for WireSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireSecurity").field("tls", &self.tls).field("token_key", &self.token_key.as_ref().map(|_| "***")).finish()
    }
}

/// A message read from the client.
struct Message {
    kind: u8,
    payload: Vec<u8>,
}

async fn read_message<S: AsyncRead + Unpin>(stream: &mut S, limit: usize) -> std::io::Result<Option<Message>> {
    let mut payload = Vec::new();
    loop {
        let mut header = [0u8; 8];
        match stream.read_exact(&mut header).await {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof && payload.is_empty() => return Ok(None),
            Err(error) => return Err(error),
        }
        let kind = header[0];
        let length = usize::from(u16::from_be_bytes([header[2], header[3]]));
        if length < 8 {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "TDS packet shorter than its header"));
        }
        let start = payload.len();
        if start + length - 8 > limit {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("TDS request larger than {limit} bytes")));
        }
        payload.resize(start + length - 8, 0);
        stream.read_exact(&mut payload[start..]).await?;
        if header[1] & 0x01 != 0 {
            return Ok(Some(Message { kind, payload }));
        }
    }
}

async fn write_message<S: AsyncWrite + Unpin>(stream: &mut S, payload: &[u8], packet_size: usize, spid: u16) -> std::io::Result<()> {
    let chunk = packet_size.clamp(512, 32_767) - 8;
    let mut out = Vec::with_capacity(payload.len() + payload.len() / chunk * 8 + 8);
    let pieces: Vec<&[u8]> = if payload.is_empty() { vec![&[][..]] } else { payload.chunks(chunk).collect() };
    let last = pieces.len() - 1;
    for (index, piece) in pieces.into_iter().enumerate() {
        out.push(REPLY);
        out.push(u8::from(index == last));
        out.extend_from_slice(&((piece.len() + 8) as u16).to_be_bytes());
        out.extend_from_slice(&spid.to_be_bytes());
        out.push((index as u8).wrapping_add(1));
        out.push(0);
        out.extend_from_slice(piece);
    }
    stream.write_all(&out).await?;
    stream.flush().await
}

/// Serves the simulator on `listener` until `shutdown`.
pub async fn serve(sim: Simulator, listener: TcpListener, security: WireSecurity, shutdown: CancellationToken) {
    let connections = Arc::new(AtomicU64::new(0));
    let security = Arc::new(security);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(error = %error, "sim: accept failed");
                    continue;
                }
            },
            () = shutdown.cancelled() => return,
        };
        let sim = sim.clone();
        let connections = connections.clone();
        let security = security.clone();
        tokio::spawn(async move {
            connections.fetch_add(1, Ordering::Relaxed);
            if let Err(error) = connection(sim, stream, &security).await {
                tracing::debug!(peer = %peer, error = %error, "sim: connection ended");
            }
        });
    }
}

/// Binds `address` and serves in the background; returns the bound address.
pub async fn start(sim: Simulator, address: SocketAddr, security: WireSecurity, shutdown: CancellationToken) -> Result<SocketAddr, TdsError> {
    let listener = TcpListener::bind(address).await.map_err(|source| TdsError::Bind { address, source })?;
    let bound = listener.local_addr().map_err(|source| TdsError::Bind { address, source })?;
    tokio::spawn(serve(sim, listener, security, shutdown));
    Ok(bound)
}

async fn connection(sim: Simulator, stream: TcpStream, security: &WireSecurity) -> std::io::Result<()> {
    let mut session = sim.session();
    let result = open(&sim, stream, security, &mut session).await;
    // However the connection ended, its open transaction is rolled back, as SQL Server does.
    if session.tran_count() > 0 {
        let _ = run_in(&sim, &mut session, "ROLLBACK".to_owned(), Vec::new()).await;
    }
    result
}

/// PRELOGIN, the TLS handshake it settles on (if any), LOGIN7, then the session.
async fn open(sim: &Simulator, mut tcp: TcpStream, security: &WireSecurity, session: &mut Session) -> std::io::Result<()> {
    tcp.set_nodelay(true)?;
    let spid = session.spid;
    let Some(first) = read_message(&mut tcp, MAX_LOGIN_MESSAGE).await? else { return Ok(()) };
    let offered = security.tls.as_ref().map(|server| server.mode);
    let (negotiated, early_login) = if first.kind == PRELOGIN {
        let asked = login::prelogin_option(&first.payload, login::PRELOGIN_ENCRYPTION);
        let fed_auth = login::prelogin_option(&first.payload, login::PRELOGIN_FEDAUTHREQUIRED).is_some();
        let (reply, negotiated) = tls::negotiate(asked, offered);
        write_message(&mut tcp, &login::prelogin_reply(reply, fed_auth), 4096, spid).await?;
        (negotiated, None)
    } else if offered == Some(tls::ServerEncryption::Required) {
        // Forced encryption: a login that skipped PRELOGIN is never read.
        return Ok(());
    } else {
        (tls::Negotiated::None, Some(first))
    };
    let server = match (negotiated, &security.tls) {
        (tls::Negotiated::None, _) | (_, None) => {
            let message = match early_login {
                Some(message) => message,
                None => match read_message(&mut tcp, MAX_LOGIN_MESSAGE).await? {
                    Some(message) => message,
                    None => return Ok(()),
                },
            };
            let Some(packet_size) = sign_in(sim, &mut tcp, message, security, spid).await? else { return Ok(()) };
            return converse(sim, &mut tcp, session, packet_size).await;
        }
        (_, Some(server)) => server,
    };
    let mut encrypted = server.accept(tcp).await?;
    let Some(message) = read_message(&mut encrypted, MAX_LOGIN_MESSAGE).await? else { return Ok(()) };
    if negotiated == tls::Negotiated::LoginOnly {
        // Login-only encryption: the reply and everything after it go in the clear.
        let mut tcp = encrypted.into_inner().0.into_inner();
        let Some(packet_size) = sign_in(sim, &mut tcp, message, security, spid).await? else { return Ok(()) };
        return converse(sim, &mut tcp, session, packet_size).await;
    }
    let Some(packet_size) = sign_in(sim, &mut encrypted, message, security, spid).await? else { return Ok(()) };
    converse(sim, &mut encrypted, session, packet_size).await
}

/// Answers LOGIN7: the login's packet size when it is let in, `None` (after the error the
/// client is sent) when it is not.
async fn sign_in<S: AsyncWrite + Unpin>(sim: &Simulator, stream: &mut S, message: Message, security: &WireSecurity, spid: u16) -> std::io::Result<Option<usize>> {
    if message.kind != LOGIN7 {
        return Ok(None);
    }
    let mut response = Response::default();
    let login = match login::parse_login7(&message.payload) {
        Ok(login) => login,
        Err(error) => {
            response.message(&error, SERVER_NAME);
            response.done(DoneKind::Done, DONE_ERROR, 0);
            write_message(stream, &response.bytes, 4096, spid).await?;
            return Ok(None);
        }
    };
    // The database lock is taken off the async threads: a long statement holding it must not
    // stop every other connection's I/O.
    let engine = sim.clone();
    let (user, password) = (login.user.clone(), login.password.clone());
    let (database, accepted) = tokio::task::spawn_blocking(move || {
        engine.engine().with_db(|db| (db.config.database.clone(), db.config.logins.iter().any(|(u, p)| *u == user && *p == password)))
    })
    .await
    .map_err(std::io::Error::other)?;
    let refused = match &login.access_token {
        Some(access_token) => token_refusal(security, access_token),
        None => (!accepted).then(|| SqlError::login_failed(&login.user)),
    };
    let known_database = login.database.is_empty() || login.database.eq_ignore_ascii_case(&database) || login.database.eq_ignore_ascii_case("master");
    if refused.is_some() || !known_database {
        if refused.is_none() {
            response.message(&SqlError::new(4060, 11, format!("Cannot open database \"{}\" requested by the login. The login failed.", login.database)), SERVER_NAME);
        }
        let user = if login.access_token.is_some() { TOKEN_PRINCIPAL } else { login.user.as_str() };
        response.message(&refused.unwrap_or_else(|| SqlError::login_failed(user)), SERVER_NAME);
        response.done(DoneKind::Done, DONE_ERROR, 0);
        write_message(stream, &response.bytes, 4096, spid).await?;
        return Ok(None);
    }
    let packet_size = if login.packet_size == 0 { 4096 } else { (login.packet_size as usize).clamp(512, 32_767) };
    let current = if login.database.is_empty() { database.clone() } else { login.database.clone() };
    response.env_text(1, &current, "master");
    response.message(&SqlError { number: 5701, state: 2, class: 0, message: format!("Changed database context to '{current}'."), blocked_by: None }, SERVER_NAME);
    response.env_collation();
    response.env_text(2, "us_english", "");
    response.login_ack();
    if login.access_token.is_some() {
        response.fed_auth_ack();
    }
    response.env_text(4, &packet_size.to_string(), "4096");
    response.done(DoneKind::Done, 0, 0);
    write_message(stream, &response.bytes, 4096, spid).await?;
    Ok(Some(packet_size))
}

/// How SQL Server names the login of a token sign-in in its errors.
const TOKEN_PRINCIPAL: &str = "<token-identified principal>";

/// Why an access token is not let in, if it is not (error 18456, the reason after it).
fn token_refusal(security: &WireSecurity, access_token: &str) -> Option<SqlError> {
    let now = chrono::Utc::now().timestamp();
    let reason = match &security.token_key {
        None => "This server trusts no access tokens.".to_owned(),
        Some(key) => match token::verify(key, access_token, now) {
            Ok(principal) => {
                tracing::debug!(principal = %principal, "sim: token sign-in");
                return None;
            }
            Err(refused) => format!("{refused}."),
        },
    };
    Some(SqlError::new(18456, 14, format!("Login failed for user '{TOKEN_PRINCIPAL}'. {reason}")))
}

/// The session after login: requests and their responses until the client leaves.
async fn converse<S: AsyncRead + AsyncWrite + Unpin>(sim: &Simulator, stream: &mut S, session: &mut Session, packet_size: usize) -> std::io::Result<()> {
    let spid = session.spid;
    let mut tran_descriptor: u64 = 0;
    while let Some(message) = read_message(stream, MAX_MESSAGE).await? {
        match message.kind {
            SQL_BATCH => {
                let sql = match skip_headers(&message.payload) {
                    Ok(rest) => {
                        let units: Vec<u16> = rest.chunks_exact(2).map(|p| u16::from_le_bytes([p[0], p[1]])).collect();
                        String::from_utf16_lossy(&units)
                    }
                    Err(error) => {
                        send_error(stream, &error, packet_size, spid, DoneKind::Done).await?;
                        continue;
                    }
                };
                let outcome = run_in(sim, session, sql, Vec::new()).await;
                if outcome.disconnect {
                    return drop_mid_response(stream, spid).await;
                }
                let response = batch_response(&outcome, false);
                write_message(stream, &response.bytes, packet_size, spid).await?;
            }
            RPC => {
                let request = match parse_rpc(&message.payload) {
                    Ok(request) => request,
                    Err(error) => {
                        send_error(stream, &error, packet_size, spid, DoneKind::Proc).await?;
                        continue;
                    }
                };
                let outcome = run_in(sim, session, request.sql, request.params).await;
                if outcome.disconnect {
                    return drop_mid_response(stream, spid).await;
                }
                let response = batch_response(&outcome, true);
                write_message(stream, &response.bytes, packet_size, spid).await?;
            }
            TRANSACTION_MANAGER => {
                let mut response = Response::default();
                let (request_type, flags) = match skip_headers(&message.payload) {
                    Ok(rest) if rest.len() >= 2 => {
                        let kind = u16::from_le_bytes([rest[0], rest[1]]);
                        // COMMIT/ROLLBACK: name (B_VARCHAR), then flags (0x01: begin a new one).
                        let flags = if matches!(kind, 7 | 8) {
                            let name_len = rest.get(2).copied().unwrap_or(0) as usize;
                            rest.get(3 + name_len * 2).copied().unwrap_or(0)
                        } else {
                            0
                        };
                        (kind, flags)
                    }
                    _ => (0, 0),
                };
                let sql = match request_type {
                    5 => "BEGIN TRANSACTION",
                    7 => "COMMIT",
                    8 => "ROLLBACK",
                    _ => "",
                };
                if !sql.is_empty() {
                    let outcome = run_in(sim, session, sql.to_owned(), Vec::new()).await;
                    if let Some(error) = &outcome.error {
                        response.message(error, SERVER_NAME);
                    }
                }
                let old = tran_descriptor.to_le_bytes();
                match request_type {
                    5 => {
                        tran_descriptor += 1;
                        response.env_bytes(8, &tran_descriptor.to_le_bytes(), &[]);
                    }
                    7 | 8 => {
                        response.env_bytes(if request_type == 7 { 9 } else { 10 }, &[], &old);
                        tran_descriptor = 0;
                        if flags & 0x01 != 0 {
                            run_in(sim, session, "BEGIN TRANSACTION".to_owned(), Vec::new()).await;
                            tran_descriptor = old_plus_one(old);
                            response.env_bytes(8, &tran_descriptor.to_le_bytes(), &[]);
                        }
                    }
                    _ => {}
                }
                response.done(DoneKind::Done, 0, 0);
                write_message(stream, &response.bytes, packet_size, spid).await?;
            }
            ATTENTION => {
                let mut response = Response::default();
                response.done(DoneKind::Done, DONE_ATTN, 0);
                write_message(stream, &response.bytes, packet_size, spid).await?;
            }
            other => {
                let error = SqlError::new(4002, 16, format!("The incoming tabular data stream (TDS) protocol stream is incorrect: packet type 0x{other:02X} is not supported."));
                send_error(stream, &error, packet_size, spid, DoneKind::Done).await?;
            }
        }
    }
    Ok(())
}

fn old_plus_one(old: [u8; 8]) -> u64 {
    u64::from_le_bytes(old).wrapping_add(1).max(1)
}

async fn drop_mid_response<S: AsyncWrite + Unpin>(stream: &mut S, spid: u16) -> std::io::Result<()> {
    // A packet without end-of-message, then nothing: the client sees the connection drop
    // in the middle of a result.
    let mut packet = vec![REPLY, 0x00, 0x00, 0x08];
    packet.extend_from_slice(&spid.to_be_bytes());
    packet.extend_from_slice(&[1, 0]);
    stream.write_all(&packet).await?;
    stream.shutdown().await
}

async fn send_error<S: AsyncWrite + Unpin>(stream: &mut S, error: &SqlError, packet_size: usize, spid: u16, kind: DoneKind) -> std::io::Result<()> {
    let mut response = Response::default();
    response.message(error, SERVER_NAME);
    response.done(kind, DONE_ERROR, 0);
    write_message(stream, &response.bytes, packet_size, spid).await
}

/// Runs a batch on a blocking thread (the engine is synchronous; faults may sleep). A panic
/// in the engine becomes error 50000 for this client instead of ending the server.
async fn run_in(sim: &Simulator, session: &mut Session, sql: String, params: Vec<(String, Value)>) -> BatchOutcome {
    let sim = sim.clone();
    let spid = session.spid;
    let mut owned = std::mem::replace(session, Session::new(spid));
    let joined = tokio::task::spawn_blocking(move || {
        let outcome = sim.execute(&mut owned, &sql, &params);
        (outcome, owned)
    })
    .await;
    match joined {
        Ok((outcome, back)) => {
            *session = back;
            outcome
        }
        Err(error) => BatchOutcome { error: Some(SqlError::new(50_000, 16, format!("internal simulator error: {error}"))), ..BatchOutcome::default() },
    }
}

fn batch_response(outcome: &BatchOutcome, rpc: bool) -> Response {
    let mut response = Response::default();
    let statement_done = if rpc { DoneKind::InProc } else { DoneKind::Done };
    for output in &outcome.outputs {
        match output {
            Output::Rows(set) => {
                let mark = response.bytes.len();
                match response.result_set(set) {
                    Ok(()) => response.done(statement_done, DONE_MORE | DONE_COUNT, set.rows.len() as u64),
                    Err(error) => {
                        response.bytes.truncate(mark);
                        response.message(&error, SERVER_NAME);
                        response.done(statement_done, DONE_MORE | DONE_ERROR, 0);
                    }
                }
            }
            Output::Count(rows) => response.done(statement_done, DONE_MORE | DONE_COUNT, *rows),
            Output::Done => {}
            Output::Status(status) => response.return_status(*status),
        }
    }
    if let Some(error) = &outcome.error {
        response.message(error, SERVER_NAME);
    }
    let final_status = if outcome.error.is_some() { DONE_ERROR } else { 0 };
    if rpc {
        response.return_status(if outcome.error.is_some() { -6 } else { 0 });
        response.done(DoneKind::Proc, final_status, 0);
    } else {
        response.done(DoneKind::Done, final_status, 0);
    }
    response
}

/// Skips the ALL_HEADERS block of a request.
fn skip_headers(payload: &[u8]) -> Result<&[u8], SqlError> {
    if payload.len() < 4 {
        return Ok(payload);
    }
    let total = u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]) as usize;
    // A request without ALL_HEADERS starts with text; a plausible header length is small.
    if (4..=payload.len()).contains(&total) && total < 1024 && payload.len() >= total {
        Ok(&payload[total..])
    } else {
        Ok(payload)
    }
}

/// An RPC turned into a statement and its parameters.
struct RpcRequest {
    sql: String,
    params: Vec<(String, Value)>,
}

fn parse_rpc(payload: &[u8]) -> Result<RpcRequest, SqlError> {
    let rest = skip_headers(payload)?;
    let mut reader = Reader::new(rest);
    let first = reader.u16le()?;
    let procedure = if first == 0xFFFF {
        match reader.u16le()? {
            10 => "sp_executesql".to_owned(),
            id => return Err(SqlError::new(2812, 16, format!("Could not find stored procedure with id {id}."))),
        }
    } else {
        reader.utf16(usize::from(first))?
    };
    let _options = reader.u16le()?;
    let mut raw: Vec<(String, Value, Option<SqlType>)> = Vec::new();
    while !reader.is_empty() {
        let name = reader.b_varchar()?;
        let _status = reader.u8()?;
        let (value, ty) = wire::read_param(&mut reader)?;
        raw.push((name, value, ty));
    }
    let bare = procedure.rsplit('.').next().unwrap_or(&procedure).to_ascii_lowercase();
    if bare == "sp_executesql" {
        let mut items = raw.into_iter();
        let sql = items.next().and_then(|(_, v, _)| v.to_text()).ok_or_else(|| SqlError::missing_parameter("sp_executesql", "@stmt"))?;
        let declaration = items.next().and_then(|(_, v, _)| v.to_text()).unwrap_or_default();
        let declared = parse_declaration(&declaration)?;
        let mut params = Vec::new();
        for (index, (name, value, _)) in items.enumerate() {
            let (declared_name, ty) = declared
                .get(index)
                .cloned()
                .or_else(|| declared.iter().find(|(n, _)| n.eq_ignore_ascii_case(&name)).cloned())
                .ok_or_else(|| SqlError::new(8178, 16, format!("The parameterized query expects parameter '{name}', which was not declared.")))?;
            params.push((declared_name, value.cast(ty)?));
        }
        return Ok(RpcRequest { sql, params });
    }
    // Any other procedure by name: EXEC it with its parameters passed by name.
    let mut arguments = Vec::new();
    let mut params = Vec::new();
    for (index, (name, value, _)) in raw.into_iter().enumerate() {
        let name = if name.is_empty() { format!("@__p{index}") } else { name };
        arguments.push(format!("{name} = {name}"));
        params.push((name, value));
    }
    Ok(RpcRequest { sql: format!("EXEC {procedure} {}", arguments.join(", ")), params })
}

/// Parses an `sp_executesql` declaration: `@P1 int,@P2 nvarchar(4000)`.
fn parse_declaration(text: &str) -> Result<Vec<(String, SqlType)>, SqlError> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut current = String::new();
    let mut parts = Vec::new();
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    parts.push(current);
    for part in parts.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        let (name, ty) = part.split_once(char::is_whitespace).ok_or_else(|| SqlError::syntax(&format!("parameter declaration `{part}`")))?;
        let ty = ty.trim();
        let ty = ty.strip_suffix("OUTPUT").or_else(|| ty.strip_suffix("output")).unwrap_or(ty).trim();
        out.push((name.to_owned(), SqlType::parse(ty)?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_parse_with_nested_commas() {
        let declared = parse_declaration("@P1 int,@P2 decimal(18, 2),@P3 nvarchar(max)").unwrap();
        assert_eq!(declared.len(), 3);
        assert_eq!(declared[1], ("@P2".to_owned(), SqlType::Decimal { precision: 18, scale: 2 }));
        assert!(parse_declaration("").unwrap().is_empty());
    }
}
