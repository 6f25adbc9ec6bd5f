//! A process's TLS material: its own certificate and key, the cluster CA,
//! and the rustls configurations made from them, re-read on demand (a
//! SIGHUP) so certificates rotate without a restart: connections opened
//! after a reload use the new certificate, open ones keep working.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::error::TlsError;
use crate::identity::Identity;
use crate::validity::Validity;

/// The three PEM files of `--tls-cert`, `--tls-key` and `--tls-ca`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file_err = |why: String| TlsError::File {
        path: path.to_path_buf(),
        why,
    };
    let bytes = std::fs::read(path).map_err(|e| file_err(e.to_string()))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err(format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = std::fs::read(path).map_err(|e| TlsError::File {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::File {
        path: path.to_path_buf(),
        why: format!("no usable private key: {e}"),
    })
}

/// The first certificate (DER) of the PEM file at `path`: a node's or
/// user's own certificate.
pub fn leaf_certificate(path: &Path) -> Result<Vec<u8>, TlsError> {
    Ok(certs(path)?.swap_remove(0).as_ref().to_vec())
}

/// The serial number of a DER certificate, in hex (`None`: it does not
/// parse).
pub fn serial_hex(der: &[u8]) -> Option<String> {
    use x509_parser::prelude::FromDer;
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(der).ok()?;
    Some(cert.tbs_certificate.raw_serial_as_string())
}

impl TlsFiles {
    /// The identity the certificate file names (read now).
    pub fn identity(&self) -> Result<Identity, TlsError> {
        let der = leaf_certificate(&self.cert)?;
        Identity::from_der(&der).map_err(|source| TlsError::Identity {
            path: self.cert.clone(),
            source,
        })
    }
}

/// Everything made from one reading of the files.
struct Material {
    identity: Identity,
    validity: Validity,
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    /// The Kafka listener's configurations (no ALPN: Kafka clients send
    /// none), one per [`KafkaClientAuth`].
    kafka_required: Arc<ServerConfig>,
    kafka_requested: Arc<ServerConfig>,
    /// A client configuration for Kafka listeners: this identity's
    /// certificate, no ALPN.
    kafka_client: Arc<ClientConfig>,
}

/// Whether a Kafka client must present a certificate (Kafka's
/// `ssl.client.auth`): `required`, or `requested` (a client without one
/// connects unauthenticated and must then authenticate with SASL, or act
/// as `User:ANONYMOUS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KafkaClientAuth {
    #[default]
    Required,
    Requested,
}

impl std::str::FromStr for KafkaClientAuth {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "required" => Ok(Self::Required),
            "requested" => Ok(Self::Requested),
            other => Err(format!(
                "ssl.client.auth {other:?} is not one of required, requested"
            )),
        }
    }
}

impl std::fmt::Display for KafkaClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Required => "required",
            Self::Requested => "requested",
        })
    }
}

/// How much of the certificate [`read`] checks beyond its identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Checks {
    /// It chains to the CA file, is valid now, and is the key's.
    All,
    /// Only that it names an identity of the cluster and is the key's
    /// (rustls refuses a key that is not the certificate's).
    IdentityOnly,
}

/// Reads and checks the files: the certificate must name an identity of
/// `cluster_id`, and with [`Checks::All`] chain to the CA file, be valid
/// now, and match the key.
fn read(files: &TlsFiles, cluster_id: &str, checks: Checks) -> Result<Material, TlsError> {
    let chain = certs(&files.cert)?;
    let identity = Identity::from_der(&chain[0]).map_err(|source| TlsError::Identity {
        path: files.cert.clone(),
        source,
    })?;
    if identity.cluster_id != cluster_id {
        return Err(TlsError::OtherCluster {
            path: files.cert.clone(),
            found_cluster: identity.cluster_id.clone(),
            found: identity,
            cluster: cluster_id.to_string(),
        });
    }
    let key = key(&files.key)?;
    let mut roots = RootCertStore::empty();
    for ca in certs(&files.ca)? {
        roots
            .add(ca)
            .map_err(|e| TlsError::Config(format!("{}: {e}", files.ca.display())))?;
    }
    let roots = Arc::new(roots);
    let validity = match checks {
        Checks::All => crate::validity::check(
            &chain,
            &key,
            roots.clone(),
            SystemTime::now(),
            &files.cert,
            &files.key,
            &files.ca,
        )?,
        Checks::IdentityOnly => Validity::of(&chain[0]).map_err(|why| TlsError::File {
            path: files.cert.clone(),
            why,
        })?,
    };
    let config_err = |e: rustls::Error| TlsError::Config(e.to_string());
    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
        .build()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let mut server = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(config_err)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(config_err)?;
    let kafka = |required: bool| -> Result<Arc<ServerConfig>, TlsError> {
        let builder = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider());
        let builder = if required {
            builder
        } else {
            builder.allow_unauthenticated()
        };
        let verifier = builder
            .build()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(config_err)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(config_err)?;
        Ok(Arc::new(config))
    };
    let kafka_required = kafka(true)?;
    let kafka_requested = kafka(false)?;
    server.alpn_protocols = vec![b"h2".to_vec()];
    let mut client = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(config_err)?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(config_err)?;
    let kafka_client = Arc::new(client.clone());
    client.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Material {
        identity,
        validity,
        server: Arc::new(server),
        client: Arc::new(client),
        kafka_required,
        kafka_requested,
        kafka_client,
    })
}

/// A process's TLS configuration, reloadable.
pub struct TlsContext {
    files: TlsFiles,
    cluster_id: String,
    checks: Checks,
    material: ArcSwap<Material>,
}

impl TlsContext {
    /// Reads the files; the certificate must name an identity of
    /// `cluster_id`, chain to the CA file, be valid now, and be the key's.
    pub fn load(files: TlsFiles, cluster_id: &str) -> Result<Self, TlsError> {
        Self::load_with(files, cluster_id, Checks::All)
    }

    /// Reads the files as [`TlsContext::load`] does, but without checking
    /// that the certificate chains to the CA file or is within its dates
    /// (only its identity): for tools that present, on purpose,
    /// certificates their peers refuse (an intruder with another CA's
    /// certificate). Nodes never load their files this way.
    pub fn load_unchecked(files: TlsFiles, cluster_id: &str) -> Result<Self, TlsError> {
        Self::load_with(files, cluster_id, Checks::IdentityOnly)
    }

    fn load_with(files: TlsFiles, cluster_id: &str, checks: Checks) -> Result<Self, TlsError> {
        let m = read(&files, cluster_id, checks)?;
        Ok(Self {
            files,
            cluster_id: cluster_id.to_string(),
            checks,
            material: ArcSwap::from_pointee(m),
        })
    }

    /// Reads the files again, checked as [`TlsContext::load`] checks them
    /// (against the CA file as it is now); on any error the current
    /// configuration stays.
    pub fn reload(&self) -> Result<Identity, TlsError> {
        let m = read(&self.files, &self.cluster_id, self.checks)?;
        let identity = m.identity.clone();
        self.material.store(Arc::new(m));
        Ok(identity)
    }

    /// This process's identity, as its current certificate names it.
    pub fn identity(&self) -> Identity {
        self.material.load().identity.clone()
    }

    /// The validity dates of the certificate in use.
    pub fn validity(&self) -> Validity {
        self.material.load().validity
    }

    /// The cluster this process's certificate must belong to.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// The files read at start and at every reload.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// The server configuration for a new connection.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.material.load().server.clone()
    }

    /// The Kafka listener's server configuration for a new connection.
    pub fn kafka_server_config(&self, auth: KafkaClientAuth) -> Arc<ServerConfig> {
        let m = self.material.load();
        match auth {
            KafkaClientAuth::Required => m.kafka_required.clone(),
            KafkaClientAuth::Requested => m.kafka_requested.clone(),
        }
    }

    /// The client configuration for a new connection to a Kafka listener
    /// (TLS with this identity's certificate, no ALPN); the server name to
    /// check is [`crate::certs::SERVER_NAME`].
    pub fn kafka_client_config(&self) -> Arc<ClientConfig> {
        self.material.load().kafka_client.clone()
    }

    /// The client configuration for a new connection.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.material.load().client.clone()
    }
}

impl std::fmt::Debug for TlsContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsContext")
            .field("files", &self.files)
            .field("identity", &self.identity().uri())
            .finish()
    }
}
