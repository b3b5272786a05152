//! Access tokens the simulator trusts for federated sign-in (TDS FEDAUTH, the way Entra ID
//! tokens reach SQL Server).
//!
//! A real server checks an Entra ID token's signature against Microsoft's published keys. The
//! simulator stands in with a shared key: it trusts JWTs signed with HMAC-SHA256 by the key in
//! `sim serve --trust-token-key FILE` whose `exp` lies ahead, and names the principal by the
//! token's `upn`, else its `sub`. [`mint`] makes such tokens (`mssql-cdc sim token`).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// Why a token was refused (said to the client after "Login failed").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefused {
    /// Not three base64url parts, or its JSON is unreadable.
    #[error("the access token is not a well-formed JWT")]
    Malformed,
    /// Signed with another key or another algorithm.
    #[error("the access token's signature is not trusted")]
    Untrusted,
    /// Its `exp` has passed.
    #[error("the access token expired at {0} (Unix seconds)")]
    Expired(i64),
}

/// HMAC-SHA256 (RFC 2104).
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new().chain_update(pad(0x36)).chain_update(message).finalize();
    Sha256::new().chain_update(pad(0x5C)).chain_update(inner).finalize().into()
}

/// Compares two byte strings in time independent of where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A signed token for `principal` that expires at `expires` (Unix seconds), with the SQL
/// audience Entra ID tokens carry.
pub fn mint(key: &[u8], principal: &str, issued: i64, expires: i64) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let claims = serde_json::json!({
        "aud": "https://database.windows.net/",
        "iss": "mssql-cdc-sim",
        "upn": principal,
        "sub": principal,
        "iat": issued,
        "exp": expires,
    });
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signed = format!("{header}.{payload}");
    let signature = URL_SAFE_NO_PAD.encode(hmac_sha256(key, signed.as_bytes()));
    format!("{signed}.{signature}")
}

/// Checks `token` against `key` at `now` (Unix seconds); the principal it names.
pub fn verify(key: &[u8], token: &str, now: i64) -> Result<String, TokenRefused> {
    let mut parts = token.trim().split('.');
    let (Some(head), Some(body), Some(signature), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(TokenRefused::Malformed);
    };
    let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).map_err(|_| TokenRefused::Malformed);
    let header: serde_json::Value = serde_json::from_slice(&decode(head)?).map_err(|_| TokenRefused::Malformed)?;
    let claims: serde_json::Value = serde_json::from_slice(&decode(body)?).map_err(|_| TokenRefused::Malformed)?;
    let expected = hmac_sha256(key, format!("{head}.{body}").as_bytes());
    if header["alg"] != "HS256" || !same(&decode(signature)?, &expected) {
        return Err(TokenRefused::Untrusted);
    }
    let expires = claims["exp"].as_i64().ok_or(TokenRefused::Malformed)?;
    if expires <= now {
        return Err(TokenRefused::Expired(expires));
    }
    let principal = claims["upn"].as_str().or_else(|| claims["sub"].as_str()).unwrap_or("token-identified principal");
    Ok(principal.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    #[test]
    fn a_minted_token_verifies_until_it_expires_and_only_with_its_key() {
        let token = mint(b"key-1", "cdc@contoso.com", 1_000, 2_000);
        assert_eq!(verify(b"key-1", &token, 1_500).unwrap(), "cdc@contoso.com");
        assert_eq!(verify(b"key-1", &token, 2_000), Err(TokenRefused::Expired(2_000)));
        assert_eq!(verify(b"key-2", &token, 1_500), Err(TokenRefused::Untrusted));
        assert_eq!(verify(b"key-1", "not a token", 1_500), Err(TokenRefused::Malformed));
        // A changed claim breaks the signature.
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        parts[1] = URL_SAFE_NO_PAD.encode(r#"{"upn":"admin","exp":9999999999}"#);
        assert_eq!(verify(b"key-1", &parts.join("."), 1_500), Err(TokenRefused::Untrusted));
    }
}
