//! Building librdkafka client settings from a [`KafkaConfig`].

use rdkafka::config::ClientConfig;

use super::config::KafkaConfig;
use crate::config::secret::SecretError;

/// Errors turning the configuration into client settings.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A secret reference (SASL password, key password) could not be resolved.
    #[error("kafka: {0}")]
    Secret(#[from] SecretError),
}

impl KafkaConfig {
    /// librdkafka settings for a producer or consumer: the passthrough properties first, then
    /// the typed settings (which win). Secrets are resolved here; the returned config is never
    /// logged (rdkafka's own `Debug` would print it).
    pub fn client_config(&self) -> Result<ClientConfig, ClientError> {
        let mut config = ClientConfig::new();
        for (key, value) in self.properties.iter() {
            config.set(key, value.to_string());
        }
        config
            .set("bootstrap.servers", &self.bootstrap_servers)
            .set("client.id", &self.client_id)
            .set("security.protocol", self.security_protocol.as_librdkafka());
        if let Some(sasl) = &self.sasl {
            if let Some(mechanism) = sasl.mechanism {
                config.set("sasl.mechanism", mechanism.as_librdkafka());
            }
            if let Some(username) = &sasl.username {
                config.set("sasl.username", username);
            }
            if let Some(password) = &sasl.password {
                config.set("sasl.password", password.resolve()?.expose());
            }
        }
        let tls = &self.tls;
        if let Some(path) = &tls.ca_location {
            config.set("ssl.ca.location", path.display().to_string());
        }
        if let Some(path) = &tls.certificate_location {
            config.set("ssl.certificate.location", path.display().to_string());
        }
        if let Some(path) = &tls.key_location {
            config.set("ssl.key.location", path.display().to_string());
        }
        if let Some(password) = &tls.key_password {
            config.set("ssl.key.password", password.resolve()?.expose());
        }
        config.set("ssl.endpoint.identification.algorithm", if tls.verify_hostname { "https" } else { "none" });
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::secret::{Secret, SecretString};
    use crate::kafka::config::{PropertyValue, SaslConfig, SaslMechanism, SecurityProtocol};

    #[test]
    fn typed_settings_and_passthrough_reach_librdkafka() {
        let mut kafka = KafkaConfig {
            bootstrap_servers: "b1:9092,b2:9092".into(),
            security_protocol: SecurityProtocol::SaslSsl,
            sasl: Some(SaslConfig {
                mechanism: Some(SaslMechanism::ScramSha512),
                username: Some("svc".into()),
                password: Some(Secret::Inline(SecretString::new("pw".into()))),
            }),
            ..KafkaConfig::default()
        };
        kafka.properties.0.insert("linger.ms".into(), PropertyValue::Integer(7));
        let config = kafka.client_config().unwrap();
        assert_eq!(config.get("bootstrap.servers"), Some("b1:9092,b2:9092"));
        assert_eq!(config.get("security.protocol"), Some("sasl_ssl"));
        assert_eq!(config.get("sasl.mechanism"), Some("SCRAM-SHA-512"));
        assert_eq!(config.get("sasl.password"), Some("pw"));
        assert_eq!(config.get("linger.ms"), Some("7"));
    }
}
