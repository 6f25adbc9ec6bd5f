//! Who a certificate names. Every Keel certificate carries one SAN URI of
//! the form `keel://<cluster-id>/<role>/<name>`:
//!
//! - `keel://prod/controller/1`: controller node 1 of cluster `prod`;
//! - `keel://prod/broker/3`: broker 3;
//! - `keel://prod/user/alice`: an operator or application.
//!
//! A peer's identity comes from its certificate alone, never from a field
//! of its request. A certificate with no such URI, with two of them, or of
//! another cluster names nobody this cluster accepts.

use std::fmt;

use keel_metadata::acl::{valid_user_name, Principal};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The role part of an identity.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    Controller(u64),
    Broker(u32),
    User(String),
}

/// A node or user of one cluster, as its certificate names it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Identity {
    pub cluster_id: String,
    pub role: Role,
}

/// Why a certificate names no usable identity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("the certificate does not parse: {0}")]
    BadCertificate(String),
    #[error(
        "the certificate names no keel:// identity (a SAN URI keel://<cluster>/<role>/<name>)"
    )]
    Missing,
    #[error("the certificate names {0} keel:// identities; exactly one is allowed")]
    Several(usize),
    #[error("{0:?} is not keel://<cluster>/(controller|broker|user)/<name>")]
    Malformed(String),
}

impl Identity {
    pub fn controller(cluster_id: &str, id: u64) -> Self {
        Self {
            cluster_id: cluster_id.into(),
            role: Role::Controller(id),
        }
    }

    pub fn broker(cluster_id: &str, id: u32) -> Self {
        Self {
            cluster_id: cluster_id.into(),
            role: Role::Broker(id),
        }
    }

    pub fn user(cluster_id: &str, name: &str) -> Self {
        Self {
            cluster_id: cluster_id.into(),
            role: Role::User(name.into()),
        }
    }

    /// The SAN URI naming this identity.
    pub fn uri(&self) -> String {
        let (role, name) = match &self.role {
            Role::Controller(id) => ("controller", id.to_string()),
            Role::Broker(id) => ("broker", id.to_string()),
            Role::User(n) => ("user", n.clone()),
        };
        format!("keel://{}/{role}/{name}", self.cluster_id)
    }

    /// Parses a SAN URI.
    pub fn from_uri(uri: &str) -> Result<Self, IdentityError> {
        let bad = || IdentityError::Malformed(uri.to_string());
        let rest = uri.strip_prefix("keel://").ok_or_else(bad)?;
        let mut parts = rest.split('/');
        let (Some(cluster), Some(role), Some(name), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        if cluster.is_empty() {
            return Err(bad());
        }
        let role = match role {
            "controller" => Role::Controller(name.parse().map_err(|_| bad())?),
            "broker" => Role::Broker(name.parse().map_err(|_| bad())?),
            "user" if valid_user_name(name) && name != "*" => Role::User(name.to_string()),
            _ => return Err(bad()),
        };
        Ok(Self {
            cluster_id: cluster.to_string(),
            role,
        })
    }

    /// The identity a DER certificate names.
    pub fn from_der(der: &[u8]) -> Result<Self, IdentityError> {
        let (_, cert) = X509Certificate::from_der(der)
            .map_err(|e| IdentityError::BadCertificate(e.to_string()))?;
        let mut found = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                if let GeneralName::URI(u) = name {
                    if u.starts_with("keel://") {
                        found.push(*u);
                    }
                }
            }
        }
        match found.as_slice() {
            [] => Err(IdentityError::Missing),
            [one] => Self::from_uri(one),
            many => Err(IdentityError::Several(many.len())),
        }
    }

    /// The principal ACLs speak of.
    pub fn principal(&self) -> Principal {
        match &self.role {
            Role::Controller(id) => Principal::Controller(*id),
            Role::Broker(id) => Principal::Broker(*id),
            Role::User(n) => Principal::User(n.clone()),
        }
    }

    pub fn is_controller(&self) -> bool {
        matches!(self.role, Role::Controller(_))
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.uri())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_round_trip_through_their_uri() {
        for id in [
            Identity::controller("prod", 1),
            Identity::broker("prod-2", 42),
            Identity::user("c", "alice@example.com"),
        ] {
            assert_eq!(Identity::from_uri(&id.uri()), Ok(id));
        }
        assert_eq!(
            Identity::user("c", "admin").principal(),
            Principal::User("admin".into())
        );
        for bad in [
            "https://prod/controller/1",
            "keel://prod/controller/x",
            "keel:///controller/1",
            "keel://prod/operator/1",
            "keel://prod/user/*",
            "keel://prod/user/a b",
            "keel://prod/broker/1/extra",
        ] {
            assert!(Identity::from_uri(bad).is_err(), "{bad}");
        }
    }
}
