//! Whether a process may use a certificate and key as its own: the
//! certificate chains to the cluster CA (checked by webpki, as a peer
//! checks it in a handshake), the moment lies within its validity dates,
//! and the private key is the certificate's. Checked at start and at every
//! reload, so a node never presents a certificate its peers would refuse.
//! Also how long the certificate has left, for the expiry metric and the
//! warning ahead of expiry.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;
use rustls::{CertificateError, Error, InconsistentKeys, RootCertStore};

use crate::error::TlsError;

/// The gauge with the seconds until this process's own certificate
/// expires (negative once it has).
pub const EXPIRY_METRIC: &str = "keel_tls_certificate_expiry_seconds";

/// The help text of [`EXPIRY_METRIC`].
pub const EXPIRY_METRIC_HELP: &str =
    "Seconds until this process's own TLS certificate expires (negative once it has).";

/// How long before its certificate expires a process starts warning.
pub const WARN_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);

/// The validity dates of a certificate, in seconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// The first second the certificate is valid.
    pub not_before: i64,
    /// The last second the certificate is valid.
    pub not_after: i64,
}

/// Seconds since the Unix epoch of `t` (negative before it).
fn unix_seconds(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// `secs` since the Unix epoch as an RFC 3339 date (UTC), or the number
/// itself when it is out of range.
pub fn format_unix(secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{secs} (Unix seconds)"))
}

impl Validity {
    /// The validity dates of a DER certificate.
    pub fn of(der: &[u8]) -> Result<Self, String> {
        use x509_parser::prelude::FromDer;
        let (_, cert) = x509_parser::certificate::X509Certificate::from_der(der)
            .map_err(|e| format!("not an X.509 certificate: {e}"))?;
        let v = cert.validity();
        Ok(Self {
            not_before: v.not_before.timestamp(),
            not_after: v.not_after.timestamp(),
        })
    }

    /// Seconds from `now` until the certificate expires (negative once it
    /// has).
    pub fn seconds_left(&self, now: SystemTime) -> i64 {
        self.not_after.saturating_sub(unix_seconds(now))
    }

    /// The whole days left at `now` when they are fewer than
    /// [`WARN_BEFORE`] (0 in the last day, negative once expired); `None`
    /// while expiry is further off.
    pub fn days_left_if_soon(&self, now: SystemTime) -> Option<i64> {
        let left = self.seconds_left(now);
        let warn = i64::try_from(WARN_BEFORE.as_secs()).unwrap_or(i64::MAX);
        (left < warn).then(|| left.div_euclid(24 * 3600))
    }
}

/// Checks that `chain` (this process's certificate first, then any
/// intermediates) chains to a certificate of `roots` and is valid at
/// `now`, and that `key` is its private key; returns the leaf's validity
/// dates. The paths name the files in errors.
pub fn check(
    chain: &[CertificateDer<'static>],
    key: &PrivateKeyDer<'static>,
    roots: Arc<RootCertStore>,
    now: SystemTime,
    cert_path: &Path,
    key_path: &Path,
    ca_path: &Path,
) -> Result<Validity, TlsError> {
    let Some((leaf, intermediates)) = chain.split_first() else {
        return Err(TlsError::NoCertificate {
            path: cert_path.to_path_buf(),
        });
    };
    let validity = Validity::of(leaf).map_err(|why| TlsError::File {
        path: cert_path.to_path_buf(),
        why,
    })?;
    let provider: Arc<CryptoProvider> = Arc::new(rustls::crypto::ring::default_provider());
    match CertifiedKey::from_der(chain.to_vec(), key.clone_key(), &provider) {
        Ok(_) => {}
        Err(Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            return Err(TlsError::KeyMismatch {
                cert: cert_path.to_path_buf(),
                key: key_path.to_path_buf(),
            })
        }
        Err(e) => {
            return Err(TlsError::File {
                path: key_path.to_path_buf(),
                why: format!("no usable private key: {e}"),
            })
        }
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider)
        .build()
        .map_err(|e| TlsError::Config(format!("{}: {e}", ca_path.display())))?;
    let at = UnixTime::since_unix_epoch(
        now.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default(),
    );
    let refused = match verifier.verify_client_cert(leaf, intermediates, at) {
        Ok(_) => return Ok(validity),
        Err(e) => e,
    };
    Err(match refused {
        Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => TlsError::Expired {
            path: cert_path.to_path_buf(),
            not_after: format_unix(validity.not_after),
        },
        Error::InvalidCertificate(
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. },
        ) => TlsError::NotYetValid {
            path: cert_path.to_path_buf(),
            not_before: format_unix(validity.not_before),
        },
        other => TlsError::Untrusted {
            path: cert_path.to_path_buf(),
            ca: ca_path.to_path_buf(),
            why: other.to_string(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::{Ca, Issued};
    use crate::identity::Identity;
    use rustls::pki_types::pem::PemObject;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    fn roots(ca: &Ca) -> Arc<RootCertStore> {
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).unwrap())
            .unwrap();
        Arc::new(roots)
    }

    fn issued(ca: &Ca, not_before: SystemTime, not_after: SystemTime) -> Issued {
        ca.issue_with_validity(
            &Identity::broker("prod", 1),
            &[],
            &[],
            not_before,
            not_after,
        )
        .unwrap()
    }

    /// `check` of `cert`'s certificate with `key`'s key against `ca`, at `now`.
    fn check_at(
        ca: &Ca,
        cert: &Issued,
        key: &Issued,
        now: SystemTime,
    ) -> Result<Validity, TlsError> {
        let chain = vec![CertificateDer::from_pem_slice(cert.cert_pem.as_bytes()).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(key.key_pem.as_bytes()).unwrap();
        check(
            &chain,
            &key,
            roots(ca),
            now,
            Path::new("broker-1.pem"),
            Path::new("broker-1-key.pem"),
            Path::new("ca.pem"),
        )
    }

    #[test]
    fn a_certificate_of_the_ca_within_its_dates_and_with_its_key_passes() {
        let ca = Ca::new("prod").unwrap();
        let now = SystemTime::now();
        let good = issued(&ca, now - DAY, now + 10 * DAY);
        let v = check_at(&ca, &good, &good, now).unwrap();
        assert_eq!(v.not_after, unix_seconds(now + 10 * DAY));
        assert_eq!(v.not_before, unix_seconds(now - DAY));
    }

    #[test]
    fn a_certificate_of_another_ca_is_refused() {
        let ca = Ca::new("prod").unwrap();
        let other = Ca::new("prod").unwrap();
        let now = SystemTime::now();
        let stranger = issued(&other, now - DAY, now + 10 * DAY);
        let e = check_at(&ca, &stranger, &stranger, now).unwrap_err();
        assert!(matches!(e, TlsError::Untrusted { .. }), "{e:?}");
        assert!(
            e.to_string().contains("does not chain to the CA in ca.pem"),
            "{e}"
        );
    }

    #[test]
    fn a_certificate_outside_its_dates_is_refused() {
        let ca = Ca::new("prod").unwrap();
        let now = SystemTime::now();
        let expired = issued(&ca, now - 10 * DAY, now - DAY);
        let e = check_at(&ca, &expired, &expired, now).unwrap_err();
        assert!(matches!(e, TlsError::Expired { .. }), "{e:?}");
        assert!(e.to_string().contains("broker-1.pem expired on "), "{e}");
        let early = issued(&ca, now + DAY, now + 10 * DAY);
        let e = check_at(&ca, &early, &early, now).unwrap_err();
        assert!(matches!(e, TlsError::NotYetValid { .. }), "{e:?}");
        assert!(e.to_string().contains("is not valid yet"), "{e}");
        // The moment checked is the one given: the good certificate of
        // today is expired in eleven days and not valid two days ago.
        let good = issued(&ca, now - DAY, now + 10 * DAY);
        assert!(matches!(
            check_at(&ca, &good, &good, now + 11 * DAY),
            Err(TlsError::Expired { .. })
        ));
        assert!(matches!(
            check_at(&ca, &good, &good, now - 2 * DAY),
            Err(TlsError::NotYetValid { .. })
        ));
    }

    #[test]
    fn a_key_that_is_not_the_certificates_is_refused() {
        let ca = Ca::new("prod").unwrap();
        let now = SystemTime::now();
        let mine = issued(&ca, now - DAY, now + 10 * DAY);
        let another = issued(&ca, now - DAY, now + 10 * DAY);
        let e = check_at(&ca, &mine, &another, now).unwrap_err();
        assert!(matches!(e, TlsError::KeyMismatch { .. }), "{e:?}");
        assert!(
            e.to_string()
                .contains("broker-1-key.pem is not the private key of broker-1.pem"),
            "{e}"
        );
    }

    #[test]
    fn expiry_is_warned_of_in_the_last_thirty_days() {
        let now = SystemTime::now();
        let at = |days_left: u32| Validity {
            not_before: 0,
            not_after: unix_seconds(now + days_left * DAY + Duration::from_secs(60)),
        };
        assert_eq!(at(10).days_left_if_soon(now), Some(10));
        assert_eq!(at(10).seconds_left(now), 10 * 24 * 3600 + 60);
        assert_eq!(at(29).days_left_if_soon(now), Some(29));
        assert_eq!(at(30).days_left_if_soon(now), None);
        assert_eq!(at(365).days_left_if_soon(now), None);
        assert_eq!(at(0).days_left_if_soon(now), Some(0));
        let gone = Validity {
            not_before: 0,
            not_after: unix_seconds(now - DAY),
        };
        assert_eq!(gone.days_left_if_soon(now), Some(-1));
        assert_eq!(gone.seconds_left(now), -24 * 3600);
    }

    #[test]
    fn dates_are_written_as_rfc_3339() {
        assert_eq!(format_unix(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            format_unix(i64::MAX),
            format!("{} (Unix seconds)", i64::MAX)
        );
    }
}
