//! PRELOGIN and LOGIN7: what the client asks for, and the server's answers.

use super::wire::{Put, Reader};
use crate::error::{SqlError, SqlResult};

/// What LOGIN7 carried. Deliberately not `Debug`: it holds a password.
#[derive(Default)]
pub struct Login {
    /// Requested packet size.
    pub packet_size: u32,
    /// SQL login name.
    pub user: String,
    /// Its password (never logged).
    pub password: String,
    /// Requested database (empty: the default).
    pub database: String,
    /// Application name.
    pub app_name: String,
    /// The access token of a federated sign-in (FEDAUTH feature, security-token library),
    /// never logged; user and password are then empty.
    pub access_token: Option<String>,
}

/// The PRELOGIN reply: version 16.0, the negotiated `encryption` value, instance OK, MARS
/// off, and FEDAUTHREQUIRED (0x01: the client echoes it) when the client sent that option.
pub fn prelogin_reply(encryption: u8, fed_auth: bool) -> Vec<u8> {
    let mut tokens = vec![0x00u8, 0x01, 0x02, 0x04];
    let encryption = [encryption];
    let mut data: Vec<&[u8]> = vec![&[16, 0, 0x03, 0xE8, 0, 0], &encryption, &[0x00], &[0x00]];
    if fed_auth {
        tokens.push(0x06);
        data.push(&[0x01]);
    }
    let table_len = tokens.len() * 5 + 1;
    let mut out = Vec::new();
    let mut offset = table_len;
    for (token, item) in tokens.iter().zip(&data) {
        out.push(*token);
        out.extend_from_slice(&(offset as u16).to_be_bytes());
        out.extend_from_slice(&(item.len() as u16).to_be_bytes());
        offset += item.len();
    }
    out.push(0xFF);
    for item in data {
        out.extend_from_slice(item);
    }
    out
}

/// The first byte of PRELOGIN option `option` (0x01 ENCRYPTION, 0x06 FEDAUTHREQUIRED) in
/// the client's PRELOGIN, if it sent it.
pub fn prelogin_option(payload: &[u8], option: u8) -> Option<u8> {
    let mut at = 0;
    while at + 5 <= payload.len() && payload[at] != 0xFF {
        let token = payload[at];
        let offset = usize::from(u16::from_be_bytes([payload[at + 1], payload[at + 2]]));
        if token == option {
            return payload.get(offset).copied();
        }
        at += 5;
    }
    None
}

/// PRELOGIN's ENCRYPTION option.
pub const PRELOGIN_ENCRYPTION: u8 = 0x01;
/// PRELOGIN's FEDAUTHREQUIRED option.
pub const PRELOGIN_FEDAUTHREQUIRED: u8 = 0x06;
/// LOGIN7's FeatureExt id of federated authentication.
const FEATURE_FEDAUTH: u8 = 0x02;
/// FEDAUTH's library: a security token the client already holds.
const FEDAUTH_SECURITY_TOKEN: u8 = 0x01;

/// The access token in LOGIN7's FeatureExt block (`extension` is the ibExtension/cbExtension
/// pair): the FEDAUTH feature with the security-token library.
fn fed_auth_token(payload: &[u8], (offset, length): (usize, usize)) -> SqlResult<Option<String>> {
    let malformed = || SqlError::new(4002, 16, "LOGIN7 FeatureExt block outside the packet");
    if length < 4 {
        return Ok(None);
    }
    let pointer = payload.get(offset..offset + 4).ok_or_else(malformed)?;
    let start = u32::from_le_bytes([pointer[0], pointer[1], pointer[2], pointer[3]]) as usize;
    let mut reader = Reader::new(payload.get(start..).ok_or_else(malformed)?);
    loop {
        let feature = reader.u8()?;
        if feature == 0xFF {
            return Ok(None);
        }
        let length = reader.u32le()? as usize;
        let data = reader.take(length)?;
        if feature != FEATURE_FEDAUTH {
            continue;
        }
        let mut data = Reader::new(data);
        let options = data.u8()?;
        if options >> 1 != FEDAUTH_SECURITY_TOKEN {
            return Err(SqlError::new(18456, 14, "Login failed: only the security-token federated authentication library is supported."));
        }
        let length = data.u32le()? as usize;
        let bytes = data.take(length)?;
        let units: Vec<u16> = bytes.chunks_exact(2).map(|p| u16::from_le_bytes([p[0], p[1]])).collect();
        return Ok(Some(String::from_utf16_lossy(&units)));
    }
}

fn unscramble(bytes: &[u8]) -> Vec<u8> {
    bytes
        .iter()
        .map(|b| {
            let x = b ^ 0xA5;
            x.rotate_left(4)
        })
        .collect()
}

/// Parses a LOGIN7 payload.
pub fn parse_login7(payload: &[u8]) -> SqlResult<Login> {
    let mut reader = Reader::new(payload);
    let _length = reader.u32le()?;
    let _version = reader.u32le()?;
    let packet_size = reader.u32le()?;
    reader.take(24)?; // prog version, pid, connection id, flags, time zone, lcid
    let field = |reader: &mut Reader<'_>| -> SqlResult<(usize, usize)> { Ok((usize::from(reader.u16le()?), usize::from(reader.u16le()?))) };
    let _host = field(&mut reader)?;
    let user = field(&mut reader)?;
    let password = field(&mut reader)?;
    let app = field(&mut reader)?;
    let _server = field(&mut reader)?;
    let extension = field(&mut reader)?;
    let _library = field(&mut reader)?;
    let _language = field(&mut reader)?;
    let database = field(&mut reader)?;
    let text = |(offset, units): (usize, usize)| -> SqlResult<String> {
        if units == 0 {
            return Ok(String::new());
        }
        let bytes = payload.get(offset..offset + units * 2).ok_or_else(|| SqlError::new(4002, 16, "LOGIN7 field outside the packet"))?;
        let units: Vec<u16> = bytes.chunks_exact(2).map(|p| u16::from_le_bytes([p[0], p[1]])).collect();
        Ok(String::from_utf16_lossy(&units))
    };
    let password = {
        let (offset, units) = password;
        let bytes = payload.get(offset..offset + units * 2).ok_or_else(|| SqlError::new(4002, 16, "LOGIN7 password outside the packet"))?;
        let plain = unscramble(bytes);
        let units: Vec<u16> = plain.chunks_exact(2).map(|p| u16::from_le_bytes([p[0], p[1]])).collect();
        String::from_utf16_lossy(&units)
    };
    // OptionFlags3 (byte 27) bit fExtension: ibExtension points at the FeatureExt block.
    let access_token = if payload.get(27).is_some_and(|flags| flags & 0x10 != 0) { fed_auth_token(payload, extension)? } else { None };
    Ok(Login { packet_size, user: text(user)?, password, database: text(database)?, app_name: text(app)?, access_token })
}

/// Builds a LOGIN7 payload (tests use it to play a client).
pub fn build_login7(user: &str, password: &str, database: &str) -> Vec<u8> {
    let scramble = |text: &str| -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.utf16(text);
        bytes.iter().map(|b| b.rotate_left(4) ^ 0xA5).collect()
    };
    let fields: [Vec<u8>; 9] = [
        { let mut b = Vec::new(); b.utf16("host"); b },
        { let mut b = Vec::new(); b.utf16(user); b },
        scramble(password),
        { let mut b = Vec::new(); b.utf16("test"); b },
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        { let mut b = Vec::new(); b.utf16(database); b },
    ];
    let fixed = 94usize;
    let mut data = Vec::new();
    let mut table = Vec::new();
    for field in &fields {
        table.u16le((fixed + data.len()) as u16);
        table.u16le((field.len() / 2) as u16);
        data.extend_from_slice(field);
    }
    let mut out = Vec::new();
    out.u32le((fixed + data.len()) as u32);
    out.extend_from_slice(&[0x04, 0, 0, 0x74]);
    out.u32le(4096);
    out.extend_from_slice(&[0u8; 24]);
    out.extend_from_slice(&table);
    out.extend_from_slice(&[0u8; 6]);
    out.extend_from_slice(&[0u8; 16]);
    out.resize(fixed, 0);
    out.extend_from_slice(&data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login7_fields_and_password_decode() {
        let payload = build_login7("sa", "Pä55 word", "sales");
        let login = parse_login7(&payload).unwrap();
        assert_eq!((login.user.as_str(), login.password.as_str(), login.database.as_str()), ("sa", "Pä55 word", "sales"));
    }

    #[test]
    fn prelogin_reply_carries_the_negotiated_encryption_and_fedauth_only_when_asked() {
        let reply = prelogin_reply(0x02, false);
        assert_eq!(prelogin_option(&reply, PRELOGIN_ENCRYPTION), Some(0x02));
        assert_eq!(prelogin_option(&reply, PRELOGIN_FEDAUTHREQUIRED), None);
        let reply = prelogin_reply(0x03, true);
        assert_eq!(prelogin_option(&reply, PRELOGIN_ENCRYPTION), Some(0x03));
        assert_eq!(prelogin_option(&reply, PRELOGIN_FEDAUTHREQUIRED), Some(0x01));
    }

    /// `login7` with a FeatureExt block holding FEDAUTH with `library` and `token`, its
    /// declared token length `declared` (to plant a truncation).
    fn with_fed_auth(mut login7: Vec<u8>, library: u8, token: &str, declared: Option<u32>) -> Vec<u8> {
        let pointer_at = login7.len();
        login7[56..58].copy_from_slice(&(pointer_at as u16).to_le_bytes());
        login7[58..60].copy_from_slice(&4u16.to_le_bytes());
        login7[27] |= 0x10;
        login7.u32le((pointer_at + 4) as u32);
        let mut utf16 = Vec::new();
        utf16.utf16(token);
        login7.push(FEATURE_FEDAUTH);
        login7.u32le((1 + 4 + utf16.len()) as u32);
        login7.push(library << 1);
        login7.u32le(declared.unwrap_or(utf16.len() as u32));
        login7.extend_from_slice(&utf16);
        login7.push(0xFF);
        let total = login7.len() as u32;
        login7[..4].copy_from_slice(&total.to_le_bytes());
        login7
    }

    #[test]
    fn a_fedauth_token_is_read_from_the_feature_extension_and_bad_blocks_are_refused() {
        let login = parse_login7(&with_fed_auth(build_login7("", "", "sales"), FEDAUTH_SECURITY_TOKEN, "eyJ.token.sig", None)).unwrap();
        assert_eq!(login.access_token.as_deref(), Some("eyJ.token.sig"));
        // A token longer than its block, and another authentication library, are refused.
        assert!(parse_login7(&with_fed_auth(build_login7("", "", ""), FEDAUTH_SECURITY_TOKEN, "abc", Some(4096))).is_err());
        let other = parse_login7(&with_fed_auth(build_login7("", "", ""), 0x02, "abc", None)).err().unwrap();
        assert_eq!(other.number, 18456);
        // A pointer past the packet.
        let mut broken = with_fed_auth(build_login7("", "", ""), FEDAUTH_SECURITY_TOKEN, "abc", None);
        let at = usize::from(u16::from_le_bytes([broken[56], broken[57]]));
        broken[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(parse_login7(&broken).is_err());
    }

    #[test]
    fn a_login_without_the_extension_flag_has_no_token() {
        let login = parse_login7(&build_login7("sa", "x", "")).unwrap();
        assert!(login.access_token.is_none());
    }
}
