//! SASL on the Kafka listener (KIP-43, KIP-152): SaslHandshake names a
//! mechanism, then SaslAuthenticate carries its tokens. SCRAM-SHA-256 and
//! SCRAM-SHA-512 (KIP-84) check a salted credential from the metadata log
//! ([`keel_metadata::scram`]); PLAIN (only when the operator turned it on,
//! and only over TLS) checks the password against the same credential.
//!
//! Pure: a request's bytes, the connection's [`SaslState`], the cluster's
//! [`Access`] and a fresh server nonce in; the answer and what became of
//! the login out. A failed login is answered SASL_AUTHENTICATION_FAILED
//! with Kafka's own words (which never say whether the user exists) and
//! the connection is then closed, as Kafka closes it.

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use kafka_protocol::ResponseError;
use keel_metadata::acl::Principal;
use keel_metadata::scram::{ScramCredential, ScramMechanism, ScramServer};

use crate::access::Access;
use crate::dispatch::{respond, Outcome};

/// The SASL APIs a listener with SASL serves. After a SaslHandshake v0
/// (KIP-43, as kafka-python 2.0 and librdkafka's feature check use it) the
/// tokens travel raw, each in a length-prefixed frame of its own rather
/// than in a SaslAuthenticate request ([`raw_token`]); after v1 they
/// travel in SaslAuthenticate (KIP-152).
pub const SASL_SERVED: [(ApiKey, i16, i16); 2] = [
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
];

/// A mechanism a listener offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    Scram(ScramMechanism),
    /// The password itself, in the clear inside TLS (`--kafka-sasl-plain`).
    Plain,
}

impl Mechanism {
    /// Kafka's name of the mechanism.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Scram(m) => m.name(),
            Mechanism::Plain => "PLAIN",
        }
    }
}

/// Where one connection's login stands.
#[derive(Default)]
pub enum SaslState {
    /// No handshake yet.
    #[default]
    Idle,
    /// A mechanism was chosen; its first token is awaited.
    Chosen(Mechanism),
    /// SCRAM's server-first was sent; client-final is awaited.
    Scram(Box<ScramServer>),
    /// Logged in (or failed and closing): no second handshake.
    Done,
}

/// What became of the login with one request.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// The exchange goes on (or nothing changed).
    Continue,
    /// The client is now this principal.
    Authenticated(Principal),
    /// Send the answer, then close: the reason is for the audit log.
    Failed(String),
}

/// Kafka's words for a failed login (`ScramSaslServer`, `PlainSaslServer`).
fn failed_words(m: Mechanism) -> String {
    format!(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
        m.name()
    )
}

/// What a login is checked with.
#[derive(Clone, Copy)]
pub struct Login<'a> {
    /// The listener's mechanisms.
    pub offered: &'a [Mechanism],
    /// The credentials (and who may do what).
    pub access: &'a Access,
    /// Fresh random printable text for SCRAM's server nonce.
    pub nonce: &'a str,
}

/// Answers one SaslHandshake or SaslAuthenticate request (`body`: the bytes
/// after its header) on a connection in `state`.
pub fn handle(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    mut body: Bytes,
    state: &mut SaslState,
    login: Login<'_>,
) -> (Outcome, Step) {
    let Login {
        offered,
        access,
        nonce,
    } = login;
    let undecodable = |e: String| {
        (
            Outcome::Close(format!("{api:?} v{version}: {e}")),
            Step::Failed(e),
        )
    };
    match api {
        ApiKey::SaslHandshake => {
            let req = match SaslHandshakeRequest::decode(&mut body, version) {
                Ok(r) => r,
                Err(e) => return undecodable(format!("undecodable request: {e}")),
            };
            let names: Vec<StrBytes> = offered
                .iter()
                .map(|m| StrBytes::from_static_str(m.name()))
                .collect();
            let answer = |code: Option<ResponseError>| {
                SaslHandshakeResponse::default()
                    .with_error_code(code.map_or(0, |c| c.code()))
                    .with_mechanisms(names.clone())
            };
            if !matches!(state, SaslState::Idle) {
                let why = "a second SASL handshake on one connection".to_string();
                let out = respond(
                    api,
                    version,
                    correlation_id,
                    &answer(Some(ResponseError::IllegalSaslState)),
                );
                return (out, Step::Failed(why));
            }
            let asked = req.mechanism.as_str();
            match offered.iter().find(|m| m.name() == asked) {
                Some(m) => {
                    *state = SaslState::Chosen(*m);
                    let out = respond(api, version, correlation_id, &answer(None));
                    (out, Step::Continue)
                }
                None => {
                    // The client may try another mechanism it supports.
                    let out = respond(
                        api,
                        version,
                        correlation_id,
                        &answer(Some(ResponseError::UnsupportedSaslMechanism)),
                    );
                    (out, Step::Continue)
                }
            }
        }
        ApiKey::SaslAuthenticate => {
            let req = match SaslAuthenticateRequest::decode(&mut body, version) {
                Ok(r) => r,
                Err(e) => return undecodable(format!("undecodable request: {e}")),
            };
            let (answer, step) = authenticate(&req.auth_bytes, state, access, nonce);
            (respond(api, version, correlation_id, &answer), step)
        }
        other => undecodable(format!("{other:?} is not a SASL request")),
    }
}

/// One token of a login begun with SaslHandshake v0, which carries tokens
/// raw: the token to send back (framed by the caller), or `None` with
/// [`Step::Failed`] (v0 has no way to say why: the connection is closed).
pub fn raw_token(token: &[u8], state: &mut SaslState, login: Login<'_>) -> (Option<Vec<u8>>, Step) {
    let (answer, step) = authenticate(token, state, login.access, login.nonce);
    if answer.error_code == 0 {
        (Some(answer.auth_bytes.to_vec()), step)
    } else {
        (None, step)
    }
}

/// One SaslAuthenticate token.
fn authenticate(
    token: &[u8],
    state: &mut SaslState,
    access: &Access,
    nonce: &str,
) -> (SaslAuthenticateResponse, Step) {
    let ok = |bytes: Vec<u8>| {
        SaslAuthenticateResponse::default()
            .with_auth_bytes(Bytes::from(bytes))
            // No re-authentication is asked for (KIP-368).
            .with_session_lifetime_ms(0)
    };
    // The client is told Kafka's words; the audit line also says why.
    let fail = |code: ResponseError, told: String, why: String| {
        (
            SaslAuthenticateResponse::default()
                .with_error_code(code.code())
                .with_error_message(Some(StrBytes::from_string(told.clone()))),
            Step::Failed(format!("{told} ({why})")),
        )
    };
    match std::mem::replace(state, SaslState::Done) {
        SaslState::Chosen(Mechanism::Scram(m)) => {
            let lookup = |user: &str| access.credential(user, m).cloned();
            match ScramServer::start(m, token, nonce, lookup) {
                Ok((server, first)) => {
                    *state = SaslState::Scram(Box::new(server));
                    (ok(first), Step::Continue)
                }
                Err(e) => fail(
                    ResponseError::SaslAuthenticationFailed,
                    failed_words(Mechanism::Scram(m)),
                    e.to_string(),
                ),
            }
        }
        SaslState::Scram(server) => {
            let m = Mechanism::Scram(server.mechanism());
            let user = server.user().to_string();
            match server.finish(token) {
                Ok(last) => (ok(last), Step::Authenticated(Principal::User(user))),
                Err(e) => fail(
                    ResponseError::SaslAuthenticationFailed,
                    failed_words(m),
                    format!("user {user:?}: {e}"),
                ),
            }
        }
        SaslState::Chosen(Mechanism::Plain) => match plain(token, access) {
            Ok(user) => (ok(Vec::new()), Step::Authenticated(Principal::User(user))),
            Err(why) => fail(
                ResponseError::SaslAuthenticationFailed,
                failed_words(Mechanism::Plain),
                why,
            ),
        },
        SaslState::Idle | SaslState::Done => fail(
            ResponseError::IllegalSaslState,
            "SaslAuthenticate without a SaslHandshake before it".to_string(),
            "out of order".to_string(),
        ),
    }
}

/// Checks a PLAIN token (`authzid NUL user NUL password`) against the
/// user's strongest SCRAM credential; the user's name on success.
fn plain(token: &[u8], access: &Access) -> Result<String, String> {
    let mut parts = token.split(|b| *b == 0);
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("a PLAIN token is authzid NUL user NUL password".into());
    };
    let user = std::str::from_utf8(user).map_err(|_| "the user name is not UTF-8".to_string())?;
    if !authzid.is_empty() && authzid != user.as_bytes() {
        return Err("an authorization id other than the user name".into());
    }
    let stored = [ScramMechanism::Sha512, ScramMechanism::Sha256]
        .into_iter()
        .find_map(|m| access.credential(user, m))
        .ok_or_else(|| format!("user {user:?}: invalid credentials"))?;
    let given =
        ScramCredential::from_password(stored.mechanism, password, &stored.salt, stored.iterations)
            .map_err(|e| format!("user {user:?}: {e}"))?;
    if same(&given.stored_key, &stored.stored_key) {
        Ok(user.to_string())
    } else {
        Err(format!("user {user:?}: invalid credentials"))
    }
}

/// Equality that takes the same time wherever the bytes differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_metadata::scram::ScramClient;

    fn access_with(user: &str, password: &str) -> Access {
        let mut a = Access::default();
        for m in ScramMechanism::ALL {
            let c = ScramCredential::from_password(m, password.as_bytes(), b"salt-of-keel", 4096)
                .unwrap();
            a.credentials.insert((user.to_string(), m), c);
        }
        a
    }

    fn auth_body(token: &[u8], version: i16) -> Bytes {
        use kafka_protocol::protocol::Encodable;
        let mut buf = bytes::BytesMut::new();
        SaslAuthenticateRequest::default()
            .with_auth_bytes(Bytes::copy_from_slice(token))
            .encode(&mut buf, version)
            .unwrap();
        buf.freeze()
    }

    fn handshake_body(mechanism: &'static str) -> Bytes {
        use kafka_protocol::protocol::Encodable;
        let mut buf = bytes::BytesMut::new();
        SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_static_str(mechanism))
            .encode(&mut buf, 1)
            .unwrap();
        buf.freeze()
    }

    fn answer_of(out: &Outcome, version: i16) -> SaslAuthenticateResponse {
        let Outcome::Respond { frame, .. } = out else {
            panic!("{out:?}")
        };
        let mut b = frame.slice(4..);
        let _ = kafka_protocol::messages::ResponseHeader::decode(
            &mut b,
            ApiKey::SaslAuthenticate.response_header_version(version),
        )
        .unwrap();
        SaslAuthenticateResponse::decode(&mut b, version).unwrap()
    }

    const OFFERED: [Mechanism; 3] = [
        Mechanism::Scram(ScramMechanism::Sha256),
        Mechanism::Scram(ScramMechanism::Sha512),
        Mechanism::Plain,
    ];

    fn login(
        mechanism: ScramMechanism,
        user: &str,
        password: &str,
        access: &Access,
    ) -> (Step, SaslState) {
        let mut state = SaslState::Idle;
        let (_, step) = handle(
            ApiKey::SaslHandshake,
            1,
            1,
            handshake_body(mechanism.name()),
            &mut state,
            Login {
                offered: &OFFERED,
                access,
                nonce: "servernonce0123456789",
            },
        );
        assert_eq!(step, Step::Continue);
        let mut client = ScramClient::new(mechanism, user, password, "clientnonce9876543210");
        let (out, step) = handle(
            ApiKey::SaslAuthenticate,
            2,
            2,
            auth_body(&client.client_first(), 2),
            &mut state,
            Login {
                offered: &OFFERED,
                access,
                nonce: "servernonce0123456789",
            },
        );
        if step != Step::Continue {
            return (step, state);
        }
        let first = answer_of(&out, 2).auth_bytes;
        let last = client.server_first(&first).unwrap();
        let (out, step) = handle(
            ApiKey::SaslAuthenticate,
            2,
            3,
            auth_body(&last, 2),
            &mut state,
            Login {
                offered: &OFFERED,
                access,
                nonce: "servernonce0123456789",
            },
        );
        if let Step::Authenticated(_) = step {
            client
                .server_final(&answer_of(&out, 2).auth_bytes)
                .expect("the server proves it knows the credential");
        }
        (step, state)
    }

    #[test]
    fn scram_logs_in_with_the_right_password_and_fails_alike_otherwise() {
        let access = access_with("alice", "s3cret");
        for m in ScramMechanism::ALL {
            let (step, _) = login(m, "alice", "s3cret", &access);
            assert_eq!(step, Step::Authenticated(Principal::User("alice".into())));
            let (wrong, _) = login(m, "alice", "guess", &access);
            let (unknown, _) = login(m, "mallory", "s3cret", &access);
            for step in [wrong, unknown] {
                let Step::Failed(why) = step else {
                    panic!("{step:?}")
                };
                assert!(why.starts_with(&failed_words(Mechanism::Scram(m))), "{why}");
            }
        }
    }

    #[test]
    fn a_second_handshake_and_an_early_authenticate_are_illegal() {
        let access = access_with("alice", "s3cret");
        let (_, mut state) = login(ScramMechanism::Sha512, "alice", "s3cret", &access);
        let (_, step) = handle(
            ApiKey::SaslHandshake,
            1,
            9,
            handshake_body("SCRAM-SHA-512"),
            &mut state,
            Login {
                offered: &OFFERED,
                access: &access,
                nonce: "n0nce-n0nce-n0nce",
            },
        );
        assert!(matches!(step, Step::Failed(_)), "{step:?}");
        let mut fresh = SaslState::Idle;
        let (out, step) = handle(
            ApiKey::SaslAuthenticate,
            1,
            9,
            auth_body(b"n,,n=alice,r=abc", 1),
            &mut fresh,
            Login {
                offered: &OFFERED,
                access: &access,
                nonce: "n0nce-n0nce-n0nce",
            },
        );
        assert!(matches!(step, Step::Failed(_)));
        assert_eq!(
            answer_of(&out, 1).error_code,
            ResponseError::IllegalSaslState.code()
        );
    }

    #[test]
    fn an_unoffered_mechanism_is_refused_and_plain_checks_the_scram_credential() {
        let access = access_with("alice", "s3cret");
        let mut state = SaslState::Idle;
        let (_, step) = handle(
            ApiKey::SaslHandshake,
            1,
            1,
            handshake_body("GSSAPI"),
            &mut state,
            Login {
                offered: &OFFERED,
                access: &access,
                nonce: "n0nce-n0nce-n0nce",
            },
        );
        assert_eq!(step, Step::Continue);
        assert!(matches!(state, SaslState::Idle));
        assert_eq!(plain(b"\0alice\0s3cret", &access), Ok("alice".to_string()));
        assert!(plain(b"\0alice\0guess", &access).is_err());
        assert!(plain(b"\0bob\0s3cret", &access).is_err());
        assert!(plain(b"alice\0s3cret", &access).is_err());
        assert!(plain(b"eve\0alice\0s3cret", &access).is_err());
    }
}
