//! Tokens from Entra ID's endpoints: the host's managed identity, or an application's client
//! credentials.

use std::time::Duration;

use mssql_cdc_core::config::secret::Secret;

use super::command::unix_seconds;
use super::Fetched;
use crate::error::SourceError;

/// The instance metadata service's token endpoint (Azure VMs, AKS with pod identity).
const IMDS: &str = "http://169.254.169.254/metadata/identity/oauth2/token";
/// How long one token request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// An HTTP client; `direct`: past any `HTTP(S)_PROXY` (the instance metadata service answers
/// on the host itself only).
fn client(direct: bool) -> Result<reqwest::Client, SourceError> {
    let builder = reqwest::Client::builder().timeout(REQUEST_TIMEOUT);
    let builder = if direct { builder.no_proxy() } else { builder };
    builder.build().map_err(|error| SourceError::Token { message: format!("HTTP client: {error}"), transient: false })
}

/// A token of the host's managed identity for `resource`.
pub async fn managed_identity(client_id: Option<&str>, endpoint: Option<&str>, resource: &str) -> Result<Fetched, SourceError> {
    let hosted = (std::env::var("IDENTITY_ENDPOINT"), std::env::var("IDENTITY_HEADER"));
    let (url, version, header) = match (endpoint, hosted) {
        (Some(endpoint), _) => (endpoint.to_owned(), "2018-02-01", ("Metadata", "true".to_owned())),
        (None, (Ok(endpoint), Ok(secret))) => (endpoint, "2019-08-01", ("X-IDENTITY-HEADER", secret)),
        (None, _) => (IMDS.to_owned(), "2018-02-01", ("Metadata", "true".to_owned())),
    };
    let mut query = vec![("api-version", version), ("resource", resource)];
    if let Some(client_id) = client_id {
        query.push(("client_id", client_id));
    }
    let request = client(url == IMDS)?.get(&url).query(&query).header(header.0, header.1);
    answer("managed identity", &url, request).await
}

/// A token for `resource` by the client-credentials grant of an application.
pub async fn service_principal(authority: &str, tenant_id: &str, client_id: &str, client_secret: &Secret, resource: &str) -> Result<Fetched, SourceError> {
    let secret = client_secret.resolve().map_err(|error| SourceError::Token { message: format!("entra_id.client_secret: {error}"), transient: true })?;
    let url = format!("{authority}/{tenant_id}/oauth2/v2.0/token");
    let scope = format!("{}/.default", resource.trim_end_matches('/'));
    let form = [("grant_type", "client_credentials"), ("client_id", client_id), ("client_secret", secret.expose()), ("scope", scope.as_str())];
    let request = client(false)?.post(&url).form(&form);
    answer("service principal", &url, request).await
}

/// Sends a token request and reads `access_token` with `expires_on` or `expires_in`.
async fn answer(what: &str, url: &str, request: reqwest::RequestBuilder) -> Result<Fetched, SourceError> {
    let failed = |message: String, transient: bool| SourceError::Token { message: format!("{what} token from {url}: {message}"), transient };
    // reqwest's messages name the URL, never the form's secret.
    let response = request.send().await.map_err(|error| failed(error.to_string(), true))?;
    let status = response.status();
    let body = response.text().await.map_err(|error| failed(error.to_string(), true))?;
    let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    if !status.is_success() {
        let reason = json.get("error_description").or_else(|| json.get("error")).and_then(|v| v.as_str()).unwrap_or("no reason given");
        // 429 throttled; 404 and 410 while the metadata service is still provisioning the
        // identity (its documented retry cases).
        let transient = status.is_server_error() || matches!(status.as_u16(), 404 | 410 | 429);
        return Err(failed(format!("HTTP {status}: {reason}"), transient));
    }
    let token = json.get("access_token").and_then(|v| v.as_str()).ok_or_else(|| failed("the answer holds no access_token".to_owned(), false))?;
    let now = chrono::Utc::now().timestamp();
    let expires_at = unix_seconds(json.get("expires_on")).or_else(|| unix_seconds(json.get("expires_in")).map(|seconds| now.saturating_add(seconds)));
    Ok(Fetched::new(token.to_owned(), expires_at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A local endpoint that answers one request with `status` and `body`; the request's text
    /// comes back through the handle.
    async fn endpoint(status: &'static str, body: &'static str) -> (String, tokio::task::JoinHandle<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let handle = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buffer = [0u8; 4096];
            loop {
                let read = socket.read(&mut buffer).await.unwrap();
                if read == 0 {
                    break;
                }
                request.extend_from_slice(&buffer[..read]);
                let text = String::from_utf8_lossy(&request);
                let Some(end) = text.find("\r\n\r\n") else { continue };
                let length = text.lines().find_map(|line| line.to_ascii_lowercase().strip_prefix("content-length:").map(|n| n.trim().parse::<usize>().unwrap())).unwrap_or(0);
                if request.len() >= end + 4 + length {
                    break;
                }
            }
            let reply = format!("HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
            socket.write_all(reply.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&request).into_owned()
        });
        (format!("http://{address}"), handle)
    }

    #[tokio::test]
    async fn managed_identity_asks_for_the_sql_resource_with_the_metadata_header() {
        let (url, request) = endpoint("200 OK", r#"{"access_token":"mi-token","expires_on":"1796400000","resource":"https://database.windows.net/","token_type":"Bearer"}"#).await;
        let fetched = managed_identity(Some("client-123"), Some(&format!("{url}/token")), "https://database.windows.net/").await.unwrap();
        assert_eq!((fetched.token.expose(), fetched.expires_at), ("mi-token", Some(1_796_400_000)));
        let request = request.await.unwrap();
        assert!(request.starts_with("GET /token?api-version=2018-02-01&resource=https%3A%2F%2Fdatabase.windows.net%2F&client_id=client-123 "), "{request}");
        assert!(request.to_ascii_lowercase().contains("metadata: true"), "{request}");
    }

    #[tokio::test]
    async fn service_principal_posts_client_credentials_for_the_default_scope() {
        let (url, request) = endpoint("200 OK", r#"{"token_type":"Bearer","expires_in":3599,"access_token":"sp-token"}"#).await;
        let secret = Secret::Inline(mssql_cdc_core::config::secret::SecretString::new("s3cr3t".to_owned()));
        let before = chrono::Utc::now().timestamp();
        let fetched = service_principal(&url, "tenant-1", "app-1", &secret, "https://database.windows.net/").await.unwrap();
        assert_eq!(fetched.token.expose(), "sp-token");
        assert!(fetched.expires_at.unwrap() >= before + 3599);
        let request = request.await.unwrap();
        assert!(request.starts_with("POST /tenant-1/oauth2/v2.0/token "), "{request}");
        for part in ["grant_type=client_credentials", "client_id=app-1", "client_secret=s3cr3t", "scope=https%3A%2F%2Fdatabase.windows.net%2F.default"] {
            assert!(request.contains(part), "{part} in {request}");
        }
    }

    #[tokio::test]
    async fn a_refusal_is_final_and_names_the_reason_without_the_secret() {
        let (url, _request) = endpoint("401 Unauthorized", r#"{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided."}"#).await;
        let secret = Secret::Inline(mssql_cdc_core::config::secret::SecretString::new("s3cr3t".to_owned()));
        let error = service_principal(&url, "tenant-1", "app-1", &secret, "https://database.windows.net/").await.unwrap_err();
        let text = error.to_string();
        assert!(text.contains("AADSTS7000215") && !text.contains("s3cr3t"), "{text}");
        assert!(matches!(error, SourceError::Token { transient: false, .. }));
        let (url, _request) = endpoint("503 Service Unavailable", "{}").await;
        let error = managed_identity(None, Some(&url), "https://database.windows.net/").await.unwrap_err();
        assert!(matches!(error, SourceError::Token { transient: true, .. }), "{error}");
    }
}
