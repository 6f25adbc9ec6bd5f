//! How the harness's connections to the Kafka listeners are secured (TLS,
//! SASL_SSL with SCRAM) and the SCRAM login's pieces.

use super::*;

/// How the harness's connections to the Kafka listeners are secured
/// (Kafka's `security.protocol`, as the cluster kit's one Kafka connection
/// takes it), and the cluster whose member every server's certificate must
/// name, as Keel's own clients check.
#[derive(Clone, Debug)]
pub struct KafkaSecurity {
    pub security: kafka::KafkaSecurity,
    /// `None` on a plaintext run.
    pub cluster_id: Option<String>,
}

impl Default for KafkaSecurity {
    fn default() -> Self {
        Self {
            security: kafka::KafkaSecurity::Plaintext,
            cluster_id: None,
        }
    }
}

impl KafkaSecurity {
    /// SSL as the identity of `ctx` (the harness's admin user).
    pub fn ssl(ctx: &TlsContext) -> Self {
        Self {
            security: kafka::KafkaSecurity::Ssl(ctx.kafka_client_config()),
            cluster_id: Some(ctx.cluster_id().to_string()),
        }
    }

    /// What a run's transport gives: SSL as the transport's identity over
    /// TLS, plaintext otherwise.
    pub fn from_transport(transport: &Transport) -> Self {
        match transport {
            Transport::Plaintext => Self::default(),
            Transport::Tls(ctx) => Self::ssl(ctx),
        }
    }

    /// TLS trusting the CA certificates in `ca_pem` and presenting none
    /// (brokers run with `--kafka-ssl-client-auth requested`); no login.
    pub fn tls_only(ca_pem: &Path, cluster_id: &str) -> Result<Self, String> {
        let tls = kafka::KafkaSecurity::trusting(ca_pem).map_err(|e| format!("{e:#}"))?;
        Ok(Self {
            security: kafka::KafkaSecurity::Ssl(tls),
            cluster_id: Some(cluster_id.to_string()),
        })
    }

    /// SASL_SSL: [`KafkaSecurity::tls_only`], then a SCRAM-SHA-512 login as
    /// `user`.
    pub fn sasl_ssl(
        ca_pem: &Path,
        cluster_id: &str,
        user: &str,
        password: &str,
    ) -> Result<Self, String> {
        Ok(Self::tls_only(ca_pem, cluster_id)?.with_login(user, password))
    }

    /// The same TLS, with a SCRAM-SHA-512 login as `user` on top.
    pub fn with_login(&self, user: &str, password: &str) -> Self {
        let tls = match &self.security {
            kafka::KafkaSecurity::Plaintext => return self.clone(),
            kafka::KafkaSecurity::Ssl(tls) | kafka::KafkaSecurity::SaslSsl { tls, .. } => {
                tls.clone()
            }
        };
        Self {
            security: kafka::KafkaSecurity::SaslSsl {
                tls,
                login: kafka::ScramLogin {
                    mechanism: SASL_MECHANISM,
                    user: user.to_string(),
                    password: password.to_string(),
                },
            },
            cluster_id: self.cluster_id.clone(),
        }
    }

    /// Kafka's name of it (`security.protocol`).
    pub fn protocol(&self) -> &'static str {
        self.security.protocol()
    }
}

/// A fresh client nonce for SCRAM.
pub(crate) fn scram_nonce() -> String {
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(SCRAM_NONCE_LEN)
        .map(char::from)
        .collect()
}

pub(crate) fn sasl_handshake_request(mechanism: ScramMechanism) -> SaslHandshakeRequest {
    SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism.name()))
}
