//! Certificates made easy: a cluster CA and one certificate per controller,
//! broker and user, each naming its identity in a SAN URI (see
//! [`crate::identity`]) and the common DNS name [`SERVER_NAME`] every
//! client checks servers against (the address is not part of an identity,
//! so a node keeps its certificate when it moves). Nothing shells out to
//! `openssl`.
//!
//! Layout of a certificates directory (`keel certs init --dir DIR`):
//!
//! ```text
//! ca.pem  ca-key.pem                   the cluster's CA (keep ca-key.pem offline)
//! controller-1.pem  controller-1-key.pem
//! broker-1.pem      broker-1-key.pem
//! user-admin.pem    user-admin-key.pem
//! ```

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::identity::{Identity, Role};

/// The DNS name in every node certificate, and the TLS server name every
/// client asks for.
pub const SERVER_NAME: &str = "keel.internal";

/// How long generated certificates are valid.
const VALID_DAYS: i64 = 3 * 365;

/// Why certificates could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot make the certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} exists already; remove it or choose another directory")]
    Exists(PathBuf),
}

/// A certificate and its private key, in PEM.
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A cluster CA that can sign certificates.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate in PEM.
    pub cert_pem: String,
    /// Its private key in PEM.
    key_pem: String,
}

fn validity(p: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - time::Duration::days(1);
    p.not_after = now + time::Duration::days(VALID_DAYS);
}

impl Ca {
    /// A new CA for `cluster_id`.
    pub fn new(cluster_id: &str) -> Result<Self, CertError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.distinguished_name.push(
            DnType::CommonName,
            format!("Keel CA of cluster {cluster_id}"),
        );
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut params);
        let cert = params.self_signed(&key)?;
        Ok(Self {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A CA read back from its PEM certificate and key (to issue more).
    pub fn load(cert_pem: &str, key_pem: &str) -> Result<Self, CertError> {
        let key = KeyPair::from_pem(key_pem)?;
        Ok(Self {
            issuer: Issuer::from_ca_cert_pem(cert_pem, key)?,
            cert_pem: cert_pem.to_string(),
            key_pem: key_pem.to_string(),
        })
    }

    /// The CA's private key in PEM.
    pub fn key_pem(&self) -> String {
        self.key_pem.clone()
    }

    /// A certificate for `identity`, usable as server and client; `ips`
    /// and `dns` are extra names it answers to (for tools that check the
    /// address, e.g. a browser on the console). Valid from a day ago for
    /// three years.
    pub fn issue(
        &self,
        identity: &Identity,
        ips: &[IpAddr],
        dns: &[String],
    ) -> Result<Issued, CertError> {
        let now = time::OffsetDateTime::now_utc();
        self.issue_with_validity(
            identity,
            ips,
            dns,
            (now - time::Duration::days(1)).into(),
            (now + time::Duration::days(VALID_DAYS)).into(),
        )
    }

    /// As [`Ca::issue`], but valid from `not_before` to `not_after` (which
    /// may lie in the past or the future: a certificate about to expire,
    /// expired, or not valid yet).
    pub fn issue_with_validity(
        &self,
        identity: &Identity,
        ips: &[IpAddr],
        dns: &[String],
        not_before: SystemTime,
        not_after: SystemTime,
    ) -> Result<Issued, CertError> {
        let key = KeyPair::generate()?;
        let mut names = vec![SERVER_NAME.to_string()];
        names.extend(dns.iter().cloned());
        let mut params = CertificateParams::new(names)?;
        params
            .subject_alt_names
            .push(SanType::URI(identity.uri().as_str().try_into()?));
        for ip in ips {
            params.subject_alt_names.push(SanType::IpAddress(*ip));
        }
        params
            .distinguished_name
            .push(DnType::CommonName, identity.uri());
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.not_before = not_before.into();
        params.not_after = not_after.into();
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// The file stem of an identity's certificate (`controller-1`, `user-admin`).
pub fn file_stem(identity: &Identity) -> String {
    match &identity.role {
        Role::Controller(id) => format!("controller-{id}"),
        Role::Broker(id) => format!("broker-{id}"),
        Role::User(n) => format!("user-{n}"),
    }
}

/// The certificate and key paths of `identity` in `dir`.
pub fn paths(dir: &Path, identity: &Identity) -> (PathBuf, PathBuf) {
    let stem = file_stem(identity);
    (
        dir.join(format!("{stem}.pem")),
        dir.join(format!("{stem}-key.pem")),
    )
}

fn write_new(path: &Path, text: &str, private: bool) -> Result<(), CertError> {
    let io = |source| CertError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    if private {
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    }
    let mut f = opts.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            CertError::Exists(path.to_path_buf())
        } else {
            io(e)
        }
    })?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)
}

/// The CA whose `ca.pem` and `ca-key.pem` are in `dir` (to issue more).
pub fn load_ca(dir: &Path) -> Result<Ca, CertError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path).map_err(|source| CertError::Io { path, source })
    };
    Ca::load(&read("ca.pem")?, &read("ca-key.pem")?)
}

/// Writes `identity`'s certificate and key into `dir` (created if need
/// be; the key readable by its owner only), refusing to overwrite either.
/// Returns their paths.
pub fn write_issued(
    dir: &Path,
    identity: &Identity,
    issued: &Issued,
) -> Result<(PathBuf, PathBuf), CertError> {
    std::fs::create_dir_all(dir).map_err(|source| CertError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let (cert, key) = paths(dir, identity);
    write_new(&cert, &issued.cert_pem, false)?;
    write_new(&key, &issued.key_pem, true)?;
    Ok((cert, key))
}

/// What `init` makes.
#[derive(Clone, Debug, Default)]
pub struct InitSpec {
    pub cluster_id: String,
    pub controllers: u64,
    pub brokers: u32,
    pub users: Vec<String>,
    /// Extra IP addresses every node certificate carries.
    pub ips: Vec<IpAddr>,
    /// Extra DNS names every node certificate carries.
    pub dns: Vec<String>,
}

/// Creates `dir` with a new CA and a certificate per controller, broker and
/// user; refuses to overwrite any file. Returns the files written.
pub fn init(dir: &Path, spec: &InitSpec) -> Result<Vec<PathBuf>, CertError> {
    std::fs::create_dir_all(dir).map_err(|source| CertError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let ca = Ca::new(&spec.cluster_id)?;
    let mut written = Vec::new();
    for (name, text, private) in [
        ("ca.pem", ca.cert_pem.clone(), false),
        ("ca-key.pem", ca.key_pem(), true),
    ] {
        let p = dir.join(name);
        write_new(&p, &text, private)?;
        written.push(p);
    }
    let mut identities: Vec<Identity> = (1..=spec.controllers)
        .map(|i| Identity::controller(&spec.cluster_id, i))
        .chain((1..=spec.brokers).map(|i| Identity::broker(&spec.cluster_id, i)))
        .collect();
    identities.extend(
        spec.users
            .iter()
            .map(|u| Identity::user(&spec.cluster_id, u)),
    );
    for id in identities {
        let (ips, dns): (&[IpAddr], &[String]) = match id.role {
            Role::User(_) => (&[], &[]),
            _ => (&spec.ips, &spec.dns),
        };
        let issued = ca.issue(&id, ips, dns)?;
        let (cert, key) = write_issued(dir, &id, &issued)?;
        written.push(cert);
        written.push(key);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;

    #[test]
    fn every_certificate_names_its_identity_and_nothing_is_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let spec = InitSpec {
            cluster_id: "prod".into(),
            controllers: 3,
            brokers: 2,
            users: vec!["admin".into()],
            ips: vec!["127.0.0.1".parse().unwrap()],
            dns: vec![],
        };
        let written = init(dir.path(), &spec).unwrap();
        assert_eq!(written.len(), 2 + 2 * 6);
        for id in [
            Identity::controller("prod", 2),
            Identity::broker("prod", 2),
            Identity::user("prod", "admin"),
        ] {
            let (cert, key) = paths(dir.path(), &id);
            let der = CertificateDer::from_pem_file(&cert).unwrap();
            assert_eq!(Identity::from_der(&der).unwrap(), id);
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(&key).unwrap().permissions(),
            );
            assert_eq!(mode & 0o077, 0, "private keys are private");
        }
        assert!(matches!(init(dir.path(), &spec), Err(CertError::Exists(_))));
        // A CA read back issues more certificates.
        let ca = Ca::load(
            &std::fs::read_to_string(dir.path().join("ca.pem")).unwrap(),
            &std::fs::read_to_string(dir.path().join("ca-key.pem")).unwrap(),
        )
        .unwrap();
        let more = ca.issue(&Identity::broker("prod", 9), &[], &[]).unwrap();
        let der = CertificateDer::from_pem_slice(more.cert_pem.as_bytes()).unwrap();
        assert_eq!(
            Identity::from_der(&der).unwrap(),
            Identity::broker("prod", 9)
        );
    }
}
