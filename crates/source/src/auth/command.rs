//! Tokens printed by a command (`authentication = "token_command"`).

use std::process::Stdio;
use std::time::Duration;

use super::Fetched;
use crate::error::SourceError;

/// Runs `command` and reads the token it prints: the bare token, or the JSON of
/// `az account get-access-token` (`accessToken`, `expires_on`) or of an OAuth token endpoint
/// (`access_token`, `expires_on`).
pub async fn run(command: &[String], timeout: Duration) -> Result<Fetched, SourceError> {
    let program = command.first().map(String::as_str).unwrap_or_default();
    let failed = |message: String, transient: bool| SourceError::Token { message: format!("token_command `{program}`: {message}"), transient };
    let mut child = tokio::process::Command::new(program);
    child.args(&command[1..]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let output = match tokio::time::timeout(timeout, child.output()).await {
        Err(_) => return Err(failed(format!("did not finish within {} s (token_command_timeout_s)", timeout.as_secs()), true)),
        Ok(Err(error)) => return Err(failed(format!("cannot be run: {error}"), false)),
        Ok(Ok(output)) => output,
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: String = stderr.trim().chars().rev().take(400).collect::<Vec<_>>().into_iter().rev().collect();
        return Err(failed(format!("exited with {}: {tail}", output.status), true));
    }
    parse(&String::from_utf8_lossy(&output.stdout)).map_err(|message| failed(message, false))
}

/// The token in a command's output.
fn parse(output: &str) -> Result<Fetched, String> {
    let text = output.trim();
    if text.starts_with('{') {
        let json: serde_json::Value = serde_json::from_str(text).map_err(|error| format!("printed JSON that does not parse: {error}"))?;
        let token = json.get("accessToken").or_else(|| json.get("access_token")).and_then(|v| v.as_str()).ok_or("printed JSON without `accessToken` or `access_token`")?;
        return Ok(Fetched::new(token.to_owned(), unix_seconds(json.get("expires_on"))));
    }
    if text.is_empty() || text.contains(char::is_whitespace) {
        return Err("printed no token (expected the token alone on standard output, or JSON with accessToken)".to_owned());
    }
    Ok(Fetched::new(text.to_owned(), None))
}

/// Unix seconds given as a number or as a string of digits.
pub fn unix_seconds(value: Option<&serde_json::Value>) -> Option<i64> {
    match value? {
        serde_json::Value::Number(number) => number.as_i64(),
        serde_json::Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_a_bare_token_or_cli_json() {
        assert_eq!(parse("abc.def.ghi\n").unwrap().token.expose(), "abc.def.ghi");
        let az = parse(r#"{"accessToken": "tok", "expiresOn": "2026-12-04 16:00:00.000000", "expires_on": 1796400000, "tokenType": "Bearer"}"#).unwrap();
        assert_eq!((az.token.expose(), az.expires_at), ("tok", Some(1_796_400_000)));
        let oauth = parse(r#"{"access_token": "tok2", "expires_on": "1796400000"}"#).unwrap();
        assert_eq!((oauth.token.expose(), oauth.expires_at), ("tok2", Some(1_796_400_000)));
        assert!(parse("").is_err());
        assert!(parse("two words").is_err());
        assert!(parse(r#"{"token": "x"}"#).is_err());
    }

    #[tokio::test]
    async fn a_failing_command_names_its_program_and_keeps_no_token() {
        let command = vec!["sh".to_owned(), "-c".to_owned(), "echo secret-token; echo 'not signed in' >&2; exit 3".to_owned()];
        let error = run(&command, Duration::from_secs(10)).await.unwrap_err().to_string();
        assert!(error.contains("token_command `sh`") && error.contains("not signed in"), "{error}");
        assert!(!error.contains("secret-token"), "{error}");
        let missing = vec!["/nonexistent/get-token".to_owned()];
        assert!(run(&missing, Duration::from_secs(10)).await.unwrap_err().to_string().contains("cannot be run"));
    }
}
