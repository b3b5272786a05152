//! Response tokens: building a response message token by token.

use super::wire::{put_type_info, put_value, Put, COLLATION};
use crate::error::SqlError;
use crate::sql::ResultSet;

/// DONE status: more results follow.
pub const DONE_MORE: u16 = 0x0001;
/// DONE status: an error occurred.
pub const DONE_ERROR: u16 = 0x0002;
/// DONE status: the row count is valid.
pub const DONE_COUNT: u16 = 0x0010;
/// DONE status: acknowledges an attention.
pub const DONE_ATTN: u16 = 0x0020;

/// Token kinds of DONE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DoneKind {
    /// End of a SQL statement in a batch.
    Done = 0xFD,
    /// End of a stored procedure.
    Proc = 0xFE,
    /// End of a statement inside a procedure.
    InProc = 0xFF,
}

/// A response under construction.
#[derive(Default)]
pub struct Response {
    /// The token bytes.
    pub bytes: Vec<u8>,
}

impl Response {
    /// A DONE-family token.
    pub fn done(&mut self, kind: DoneKind, status: u16, rows: u64) {
        self.bytes.push(kind as u8);
        self.bytes.u16le(status);
        self.bytes.u16le(0);
        self.bytes.u64le(rows);
    }

    /// An ERROR (class ≥ 11) or INFO token.
    pub fn message(&mut self, error: &SqlError, server: &str) {
        // SQL Server's messages are at most 2047 characters; longer client-provided text
        // (names, declarations) is cut so the token length stays valid.
        let mut text = String::new();
        let mut units = 0;
        for c in error.message.chars() {
            units += c.len_utf16();
            if units > 2047 {
                break;
            }
            text.push(c);
        }
        let mut body = Vec::new();
        body.u32le(error.number as u32);
        body.push(error.state);
        body.push(error.class);
        body.us_varchar(&text);
        body.b_varchar(server);
        body.b_varchar("");
        body.u32le(1);
        self.bytes.push(if error.class > 10 { 0xAA } else { 0xAB });
        self.bytes.u16le(body.len() as u16);
        self.bytes.extend_from_slice(&body);
    }

    /// An ENVCHANGE with text values (database, language, packet size).
    pub fn env_text(&mut self, kind: u8, new: &str, old: &str) {
        let mut body = vec![kind];
        body.b_varchar(new);
        body.b_varchar(old);
        self.bytes.push(0xE3);
        self.bytes.u16le(body.len() as u16);
        self.bytes.extend_from_slice(&body);
    }

    /// An ENVCHANGE with byte values (collation, transaction descriptors).
    pub fn env_bytes(&mut self, kind: u8, new: &[u8], old: &[u8]) {
        let mut body = vec![kind, new.len() as u8];
        body.extend_from_slice(new);
        body.push(old.len() as u8);
        body.extend_from_slice(old);
        self.bytes.push(0xE3);
        self.bytes.u16le(body.len() as u16);
        self.bytes.extend_from_slice(&body);
    }

    /// The collation ENVCHANGE sent at login.
    pub fn env_collation(&mut self) {
        self.env_bytes(7, &COLLATION, &[]);
    }

    /// LOGINACK for TDS 7.4.
    pub fn login_ack(&mut self) {
        let mut body = vec![1u8, 0x74, 0x00, 0x00, 0x04];
        body.b_varchar("Microsoft SQL Server");
        body.extend_from_slice(&[16, 0, 0x03, 0xE8]);
        self.bytes.push(0xAD);
        self.bytes.u16le(body.len() as u16);
        self.bytes.extend_from_slice(&body);
    }

    /// FEATUREEXTACK acknowledging federated authentication (no nonce), then its terminator.
    pub fn fed_auth_ack(&mut self) {
        self.bytes.extend_from_slice(&[0xAE, 0x02]);
        self.bytes.u32le(0);
        self.bytes.push(0xFF);
    }

    /// RETURNSTATUS.
    pub fn return_status(&mut self, status: i32) {
        self.bytes.push(0x79);
        self.bytes.extend_from_slice(&status.to_le_bytes());
    }

    /// COLMETADATA and a ROW per row. Returns an error for a value that cannot be sent.
    pub fn result_set(&mut self, set: &ResultSet) -> Result<(), SqlError> {
        self.bytes.push(0x81);
        self.bytes.u16le(set.columns.len() as u16);
        for column in &set.columns {
            self.bytes.u32le(0);
            self.bytes.u16le(if column.nullable { 0x0009 } else { 0x0008 });
            put_type_info(&mut self.bytes, column.ty);
            self.bytes.b_varchar(&column.name);
        }
        for row in &set.rows {
            self.bytes.push(0xD1);
            for (column, value) in set.columns.iter().zip(row) {
                put_value(&mut self.bytes, column.ty, value)?;
            }
        }
        Ok(())
    }
}
