//! SASL SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses
//! them (KIP-84, KIP-554): the salted credential kept in the metadata log,
//! and both sides of one authentication exchange.
//!
//! An exchange is four messages:
//!
//! 1. client-first `n,,n=<user>,r=<client nonce>` ([`ScramClient::client_first`]);
//! 2. server-first `r=<client nonce><server nonce>,s=<salt>,i=<iterations>`
//!    ([`ScramServer::start`]);
//! 3. client-final `c=biws,r=<combined nonce>,p=<proof>`
//!    ([`ScramClient::server_first`]);
//! 4. server-final `v=<server signature>` ([`ScramServer::finish`]),
//!    checked by [`ScramClient::server_final`].
//!
//! Everything here is pure: nonces and salts are fresh random text the
//! caller draws and passes in, and nothing reads a clock or does I/O.
//!
//! What is deliberately not supported, as in Kafka: channel binding (no
//! `-PLUS` mechanism is offered, so a client asking for it with `p=` is
//! refused), authorization ids other than the user name itself, and
//! delegation tokens (`tokenauth=true`).
//!
//! Passwords are not SASLprep-normalised: they are used as the given bytes
//! (the UTF-8 of a `&str`), which is what Kafka's Java client does, and is
//! the same as SASLprep for printable ASCII.
//!
//! The server does not tell an unknown user from a wrong password: for an
//! unknown user it answers server-first with a mock salt and fails the
//! proof at [`ScramServer::finish`] with the same
//! [`ScramError::InvalidCredentials`] a wrong password gets.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256, Sha512};
use subtle::{Choice, ConstantTimeEq};

/// Longest SCRAM message either side reads, in bytes.
pub const MAX_MESSAGE_LEN: usize = 4096;
/// Longest user name, in bytes (decoded from its saslname).
pub const MAX_USER_LEN: usize = 1024;
/// Longest salt a credential may carry, in bytes.
pub const MAX_SALT_LEN: usize = 1024;
/// Fewest characters of the server's part of the nonce.
pub const MIN_SERVER_NONCE_LEN: usize = 16;

/// Which SCRAM variant.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ScramMechanism {
    /// SCRAM-SHA-256 (RFC 7677); Kafka type 1.
    Sha256,
    /// SCRAM-SHA-512; Kafka type 2.
    Sha512,
}

impl ScramMechanism {
    /// Every mechanism, in Kafka type order.
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// Most PBKDF2 iterations a credential may ask for (Kafka's maximum).
    pub const MAX_ITERATIONS: u32 = 16384;

    /// The SASL mechanism name: `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism of an exact, case-sensitive SASL name, as Kafka matches it.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == s)
    }

    /// Kafka's `ScramMechanism` id: 1 for SHA-256, 2 for SHA-512.
    pub fn kafka_type(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    /// The mechanism of a Kafka `ScramMechanism` id (0, UNKNOWN, and others: none).
    pub fn from_kafka_type(t: i8) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.kafka_type() == t)
    }

    /// Fewest PBKDF2 iterations a credential may ask for (Kafka's minimum).
    pub fn min_iterations(self) -> u32 {
        4096
    }

    /// Length in bytes of the hash, and so of every key and of the proof.
    pub fn hash_len(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }
}

impl fmt::Display for ScramMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ScramMechanism {
    type Err = String;

    /// The exact SASL name, or (for the command line) `sha-256`, `sha256`,
    /// `scram-sha-256` and the SHA-512 spellings, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(m) = Self::from_name(s) {
            return Ok(m);
        }
        let lower = s.to_ascii_lowercase();
        match lower.strip_prefix("scram-").unwrap_or(&lower) {
            "sha-256" | "sha256" => Ok(ScramMechanism::Sha256),
            "sha-512" | "sha512" => Ok(ScramMechanism::Sha512),
            _ => Err(format!(
                "unknown SCRAM mechanism {s:?}: expected SCRAM-SHA-256 or SCRAM-SHA-512 \
                 (also sha-256, sha-512, scram-sha-256, scram-sha-512, any case)"
            )),
        }
    }
}

/// Why a SCRAM step or credential was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    /// A message not of the SCRAM grammar; says what was wrong.
    #[error("malformed SCRAM message: {0}")]
    Malformed(String),
    /// A message longer than [`MAX_MESSAGE_LEN`].
    #[error("SCRAM message of {len} bytes exceeds the limit of {max}")]
    TooLong {
        /// The message's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Unknown user or wrong password: one variant on purpose, so that the
    /// server never tells the two apart.
    #[error("authentication failed: invalid user credentials")]
    InvalidCredentials,
    /// The nonce of client-final is not this exchange's combined nonce, or
    /// the nonce of server-first does not extend the client's.
    #[error("SCRAM nonce does not match this exchange")]
    NonceMismatch,
    /// Channel binding asked for (`p=`), or `c=` not matching the gs2 header.
    #[error("SCRAM channel binding: {0}")]
    ChannelBinding(String),
    /// A SCRAM feature Keel does not offer (authzid, mandatory extension,
    /// delegation tokens).
    #[error("unsupported SCRAM feature: {0}")]
    Unsupported(String),
    /// An iteration count outside `[min_iterations, MAX_ITERATIONS]`.
    #[error("SCRAM iteration count {got} is outside [{min}, {max}]")]
    BadIterations {
        /// The count asked for.
        got: u32,
        /// The mechanism's minimum.
        min: u32,
        /// The maximum.
        max: u32,
    },
    /// Client side: the server ended the exchange with `e=<this>`.
    #[error("SCRAM server error: {0}")]
    ServerError(String),
    /// Client side: the server's signature does not verify, so the server
    /// does not know the credential.
    #[error("SCRAM server signature does not verify")]
    BadServerSignature,
    /// A credential of the wrong shape (see [`ScramCredential::validate`]).
    #[error("invalid SCRAM credential: {0}")]
    BadCredential(String),
    /// A nonce or user name the caller supplied is unusable (empty,
    /// unprintable, containing ',', or a server nonce that is too short).
    #[error("invalid SCRAM nonce or user: {0}")]
    BadNonce(String),
    /// A step called before the one it follows.
    #[error("SCRAM step out of order: {0}")]
    OutOfOrder(String),
}

fn malformed(what: impl Into<String>) -> ScramError {
    ScramError::Malformed(what.into())
}

/// A user's salted credential, as stored in the metadata log (never the password).
/// Its `Debug` names the mechanism and iterations only: keys and salts stay
/// out of log lines, panics and `Debug` dumps of images and decisions.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ScramCredential {
    /// The mechanism the keys are for.
    pub mechanism: ScramMechanism,
    /// The salt, sent to the client in server-first.
    pub salt: Vec<u8>,
    /// PBKDF2 iteration count, sent to the client in server-first.
    pub iterations: u32,
    /// `H(ClientKey)`: verifies the client's proof.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`: signs server-final.
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramCredential {
    /// SaltedPassword = PBKDF2-HMAC(password, salt, iterations) (`Hi()` of
    /// RFC 5802). The password is used as given, without SASLprep.
    pub fn salted_password(
        mechanism: ScramMechanism,
        password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Result<Vec<u8>, ScramError> {
        check_iterations(mechanism, iterations)?;
        check_salt(salt)?;
        hi(mechanism, password, salt, iterations)
    }

    /// From a salted password, as Kafka's AlterUserScramCredentials carries
    /// it (salt and SaltedPassword).
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salted_password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Result<Self, ScramError> {
        if salted_password.len() != mechanism.hash_len() {
            return Err(ScramError::BadCredential(format!(
                "salted password of {} bytes, {} needs {}",
                salted_password.len(),
                mechanism,
                mechanism.hash_len()
            )));
        }
        let client_key = hmac(mechanism, salted_password, b"Client Key")?;
        let credential = ScramCredential {
            mechanism,
            salt: salt.to_vec(),
            iterations,
            stored_key: hash(mechanism, &client_key),
            server_key: hmac(mechanism, salted_password, b"Server Key")?,
        };
        credential.validate()?;
        Ok(credential)
    }

    /// From the password itself (used as given, without SASLprep).
    pub fn from_password(
        mechanism: ScramMechanism,
        password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Result<Self, ScramError> {
        let salted = Self::salted_password(mechanism, password, salt, iterations)?;
        Self::from_salted_password(mechanism, &salted, salt, iterations)
    }

    /// Shape checks for a credential read from a request or the log:
    /// iterations within `[min_iterations, MAX_ITERATIONS]`
    /// ([`ScramError::BadIterations`]), salt non-empty and at most
    /// [`MAX_SALT_LEN`] bytes, both keys `hash_len` bytes
    /// ([`ScramError::BadCredential`]).
    pub fn validate(&self) -> Result<(), ScramError> {
        check_iterations(self.mechanism, self.iterations)?;
        check_salt(&self.salt)?;
        let want = self.mechanism.hash_len();
        for (name, key) in [
            ("stored key", &self.stored_key),
            ("server key", &self.server_key),
        ] {
            if key.len() != want {
                return Err(ScramError::BadCredential(format!(
                    "{name} of {} bytes, {} needs {want}",
                    key.len(),
                    self.mechanism
                )));
            }
        }
        Ok(())
    }
}

fn check_iterations(mechanism: ScramMechanism, iterations: u32) -> Result<(), ScramError> {
    let (min, max) = (mechanism.min_iterations(), ScramMechanism::MAX_ITERATIONS);
    if (min..=max).contains(&iterations) {
        Ok(())
    } else {
        Err(ScramError::BadIterations {
            got: iterations,
            min,
            max,
        })
    }
}

fn check_salt(salt: &[u8]) -> Result<(), ScramError> {
    if salt.is_empty() {
        Err(ScramError::BadCredential("empty salt".into()))
    } else if salt.len() > MAX_SALT_LEN {
        Err(ScramError::BadCredential(format!(
            "salt of {} bytes exceeds {MAX_SALT_LEN}",
            salt.len()
        )))
    } else {
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Crypto (RFC 5802 §3), on maintained primitives only.

fn hi(
    mechanism: ScramMechanism,
    password: &[u8],
    salt: &[u8],
    iterations: u32,
) -> Result<Vec<u8>, ScramError> {
    let mut out = vec![0u8; mechanism.hash_len()];
    match mechanism {
        ScramMechanism::Sha256 => {
            pbkdf2::pbkdf2::<Hmac<Sha256>>(password, salt, iterations, &mut out)
        }
        ScramMechanism::Sha512 => {
            pbkdf2::pbkdf2::<Hmac<Sha512>>(password, salt, iterations, &mut out)
        }
    }
    .map_err(|_| ScramError::BadCredential("PBKDF2 refused the password as HMAC key".into()))?;
    Ok(out)
}

fn hmac(mechanism: ScramMechanism, key: &[u8], data: &[u8]) -> Result<Vec<u8>, ScramError> {
    // HMAC takes keys of any length; the error cannot happen but is not unwrapped.
    let bad_key = |_| ScramError::BadCredential("HMAC refused the key".into());
    Ok(match mechanism {
        ScramMechanism::Sha256 => {
            let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).map_err(bad_key)?;
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
        ScramMechanism::Sha512 => {
            let mut mac = <Hmac<Sha512> as Mac>::new_from_slice(key).map_err(bad_key)?;
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
    })
}

fn hash(mechanism: ScramMechanism, data: &[u8]) -> Vec<u8> {
    match mechanism {
        ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
        ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
    }
}

fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

// ---------------------------------------------------------------------------
// Grammar (RFC 5802 §7).

/// Encodes a user name as a saslname: `,` becomes `=2C` and `=` becomes `=3D`.
pub fn encode_saslname(user: &str) -> String {
    let mut out = String::with_capacity(user.len());
    for c in user.chars() {
        match c {
            ',' => out.push_str("=2C"),
            '=' => out.push_str("=3D"),
            c => out.push(c),
        }
    }
    out
}

/// Decodes a saslname (`=2C` to `,`, `=3D` to `=`) into a user name:
/// non-empty, at most [`MAX_USER_LEN`] bytes, no NUL, no bare `,` and `=`
/// only in those two escapes.
pub fn decode_saslname(s: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('=') {
        out.push_str(rest.get(..pos).unwrap_or_default());
        match rest.get(pos + 1..pos + 3) {
            Some("2C") => out.push(','),
            Some("3D") => out.push('='),
            _ => return Err(malformed("'=' in a user name not followed by 2C or 3D")),
        }
        rest = rest.get(pos + 3..).unwrap_or_default();
    }
    out.push_str(rest);
    check_user(&out).map_err(malformed)?;
    Ok(out)
}

/// What is wrong with a user name, if anything (`,` is fine: it is escaped).
fn check_user(user: &str) -> Result<(), String> {
    if user.is_empty() {
        Err("empty user name".into())
    } else if user.len() > MAX_USER_LEN {
        Err(format!(
            "user name of {} bytes exceeds {MAX_USER_LEN}",
            user.len()
        ))
    } else if user.contains('\0') {
        Err("NUL in user name".into())
    } else {
        Ok(())
    }
}

/// What is wrong with a nonce, if anything: it must be printable ASCII
/// (0x21..=0x7E) other than `,`, and non-empty.
fn check_nonce(nonce: &str) -> Result<(), String> {
    if nonce.is_empty() {
        Err("empty nonce".into())
    } else if !nonce
        .bytes()
        .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
    {
        Err("nonce has a character outside printable ASCII or a ','".into())
    } else {
        Ok(())
    }
}

/// The bytes of a message as text, within the length limit.
fn as_message(bytes: &[u8]) -> Result<&str, ScramError> {
    if bytes.len() > MAX_MESSAGE_LEN {
        return Err(ScramError::TooLong {
            len: bytes.len(),
            max: MAX_MESSAGE_LEN,
        });
    }
    std::str::from_utf8(bytes).map_err(|_| malformed("message is not UTF-8"))
}

/// The value of `part` if it is `<key>=<value>`.
fn attr<'a>(part: Option<&'a str>, key: char, what: &str) -> Result<&'a str, ScramError> {
    part.and_then(|p| p.strip_prefix(key))
        .and_then(|p| p.strip_prefix('='))
        .ok_or_else(|| malformed(format!("expected {key}= ({what})")))
}

/// Attribute names RFC 5802 gives a meaning; an extension may not reuse one.
const RESERVED_ATTRS: &[&str] = &["a", "c", "e", "i", "m", "n", "p", "r", "s", "v"];

/// Splits an extension `key=value`: key letters only and not a reserved
/// attribute, value non-empty without NUL.
fn extension(part: &str) -> Result<(&str, &str), ScramError> {
    let (key, value) = part
        .split_once('=')
        .ok_or_else(|| malformed("extension is not key=value"))?;
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(malformed("extension name is not letters"));
    }
    if RESERVED_ATTRS.contains(&key) {
        return Err(malformed(format!("attribute {key}= out of place")));
    }
    if value.is_empty() || value.contains('\0') {
        return Err(malformed(format!(
            "extension {key} has an empty value or NUL"
        )));
    }
    Ok((key, value))
}

fn decode_base64(s: &str, what: &str) -> Result<Vec<u8>, ScramError> {
    BASE64
        .decode(s)
        .map_err(|e| malformed(format!("{what} is not base64: {e}")))
}

/// A strict RFC posit-number within `u32`.
fn parse_iterations(s: &str) -> Result<u32, ScramError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.starts_with('0') {
        return Err(malformed(
            "iteration count is not a positive decimal number",
        ));
    }
    s.parse()
        .map_err(|_| malformed("iteration count does not fit 32 bits"))
}

/// A parsed client-first-message.
struct ClientFirst<'a> {
    /// `n,,`, `y,,`, `n,a=<authzid>,` as sent: what `c=` must carry.
    gs2_header: &'a str,
    /// The decoded user name.
    user: String,
    /// The client's nonce.
    nonce: &'a str,
    /// client-first-message-bare, for AuthMessage.
    bare: &'a str,
}

fn parse_client_first(msg: &str) -> Result<ClientFirst<'_>, ScramError> {
    let (flag, rest) = msg
        .split_once(',')
        .ok_or_else(|| malformed("no gs2 header"))?;
    match flag {
        "n" | "y" => {}
        f if f.starts_with("p=") => {
            return Err(ScramError::ChannelBinding(
                "client requires channel binding (p=), which is not offered".into(),
            ))
        }
        _ => return Err(malformed("gs2 channel-binding flag is not n, y or p=")),
    }
    let (authzid, bare) = rest
        .split_once(',')
        .ok_or_else(|| malformed("gs2 header does not end with ','"))?;
    let gs2_len = flag.len() + 1 + authzid.len() + 1;
    let gs2_header = msg.get(..gs2_len).ok_or_else(|| malformed("gs2 header"))?;
    let authzid = if authzid.is_empty() {
        None
    } else {
        Some(decode_saslname(attr(Some(authzid), 'a', "authzid")?)?)
    };

    let mut parts = bare.split(',');
    let first = parts.next();
    if first.is_some_and(|p| p.starts_with("m=")) {
        return Err(ScramError::Unsupported("mandatory extension m=".into()));
    }
    let user = decode_saslname(attr(first, 'n', "user name")?)?;
    let nonce = attr(parts.next(), 'r', "client nonce")?;
    check_nonce(nonce).map_err(malformed)?;
    for part in parts {
        let (key, value) = extension(part)?;
        if key == "tokenauth" && value.eq_ignore_ascii_case("true") {
            return Err(ScramError::Unsupported(
                "delegation tokens (tokenauth=true) are not supported".into(),
            ));
        }
    }
    if authzid.is_some_and(|a| a != user) {
        return Err(ScramError::Unsupported(
            "an authorization id different from the user name".into(),
        ));
    }
    Ok(ClientFirst {
        gs2_header,
        user,
        nonce,
        bare,
    })
}

// ---------------------------------------------------------------------------
// Server.

/// The server side of one exchange, between server-first and server-final.
#[derive(Clone)]
pub struct ScramServer {
    /// The mechanism negotiated.
    mechanism: ScramMechanism,
    /// The user the client claimed.
    user: String,
    /// The user's credential, or a mock one for an unknown user.
    credential: ScramCredential,
    /// Whether `credential` is the user's (false: mock, finish always fails).
    known: bool,
    /// The gs2 header of client-first, which `c=` must carry.
    gs2_header: String,
    /// client-first-message-bare, for AuthMessage.
    client_first_bare: String,
    /// server-first-message, for AuthMessage.
    server_first: String,
    /// The client's part of the nonce, as client-first sent it.
    client_nonce: String,
    /// The combined nonce: client's then server's part.
    nonce: String,
}

impl fmt::Debug for ScramServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramServer")
            .field("mechanism", &self.mechanism)
            .field("user", &self.user)
            .field("nonce", &self.nonce)
            .finish_non_exhaustive()
    }
}

impl ScramServer {
    /// Reads client-first-message; `lookup(user)` gives the user's credential
    /// for this mechanism (None: unknown user). `server_nonce` is fresh random
    /// printable text (at least [`MIN_SERVER_NONCE_LEN`] characters of
    /// 0x21..=0x7E, no `,`) supplied by the caller: the server's part, which
    /// is appended to the client's nonce to make the combined nonce.
    ///
    /// Returns the server and the server-first-message to send. An unknown
    /// user gets a mock server-first and fails at [`ScramServer::finish`],
    /// exactly like a wrong password. A credential from `lookup` of another
    /// mechanism or that fails [`ScramCredential::validate`] is an error of
    /// the credential store, reported as such.
    pub fn start(
        mechanism: ScramMechanism,
        client_first: &[u8],
        server_nonce: &str,
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Result<(ScramServer, Vec<u8>), ScramError> {
        Self::start_with_mock_secret(mechanism, client_first, server_nonce, &[], lookup)
    }

    /// [`ScramServer::start`], keying the mock salt given to unknown users
    /// with `mock_secret` (a per-cluster secret), so that an outsider who
    /// knows this code cannot recognise a mock salt. `start` uses an empty
    /// secret: the mock salt is then stable per user but predictable.
    pub fn start_with_mock_secret(
        mechanism: ScramMechanism,
        client_first: &[u8],
        server_nonce: &str,
        mock_secret: &[u8],
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Result<(ScramServer, Vec<u8>), ScramError> {
        check_nonce(server_nonce).map_err(ScramError::BadNonce)?;
        if server_nonce.len() < MIN_SERVER_NONCE_LEN {
            return Err(ScramError::BadNonce(format!(
                "server nonce of {} characters, at least {MIN_SERVER_NONCE_LEN} needed",
                server_nonce.len()
            )));
        }
        let msg = as_message(client_first)?;
        let first = parse_client_first(msg)?;

        let (credential, known) = match lookup(&first.user) {
            Some(c) => {
                if c.mechanism != mechanism {
                    return Err(ScramError::BadCredential(format!(
                        "lookup gave a {} credential for {}",
                        c.mechanism, mechanism
                    )));
                }
                c.validate()?;
                (c, true)
            }
            None => (mock_credential(mechanism, &first.user, mock_secret)?, false),
        };

        let nonce = format!("{}{server_nonce}", first.nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&credential.salt),
            credential.iterations
        );
        let reply = server_first.clone().into_bytes();
        Ok((
            ScramServer {
                mechanism,
                user: first.user,
                credential,
                known,
                gs2_header: first.gs2_header.to_string(),
                client_first_bare: first.bare.to_string(),
                server_first,
                client_nonce: first.nonce.to_string(),
                nonce,
            },
            reply,
        ))
    }

    /// The user name the client claimed (decoded from saslname: `=2C` to
    /// `,`, `=3D` to `=`). Authenticated only once [`ScramServer::finish`]
    /// succeeds.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The mechanism of this exchange.
    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// Reads client-final-message: checks the channel binding (`c=` must be
    /// the base64 of client-first's gs2 header, `biws` for `n,,`), that the
    /// nonce is the combined nonce, and the proof (in constant time), and
    /// returns the server-final-message (`v=...`) on success.
    pub fn finish(self, client_final: &[u8]) -> Result<Vec<u8>, ScramError> {
        let msg = as_message(client_final)?;
        let (without_proof, proof) = msg
            .rsplit_once(',')
            .ok_or_else(|| malformed("client-final has too few attributes"))?;
        let proof = attr(Some(proof), 'p', "proof, the last attribute")?;
        let mut parts = without_proof.split(',');
        let cbind = attr(parts.next(), 'c', "channel binding")?;
        let nonce = attr(parts.next(), 'r', "nonce")?;
        for part in parts {
            extension(part)?;
        }

        if decode_base64(cbind, "channel binding")? != self.gs2_header.as_bytes() {
            return Err(ScramError::ChannelBinding(
                "c= does not carry the gs2 header of client-first".into(),
            ));
        }
        // librdkafka before 2.1 sends its own nonce again in front of the
        // combined one (`r=<client><client><server>`); Kafka's own server
        // takes it (it checks only that the nonce ends with the combined
        // one). Taken here too, in exactly that form: the proof is still
        // over the message as sent, and the server's fresh part is in it.
        let librdkafka_form = nonce.len() == self.client_nonce.len() + self.nonce.len()
            && nonce.starts_with(&self.client_nonce)
            && nonce.ends_with(&self.nonce);
        if nonce != self.nonce && !librdkafka_form {
            return Err(ScramError::NonceMismatch);
        }
        let proof = decode_base64(proof, "proof")?;
        let len = self.mechanism.hash_len();
        if proof.len() != len {
            return Err(malformed(format!(
                "proof of {} bytes, {} needs {len}",
                proof.len(),
                self.mechanism
            )));
        }

        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.server_first
        );
        let client_signature = hmac(
            self.mechanism,
            &self.credential.stored_key,
            auth_message.as_bytes(),
        )?;
        let client_key = xor(&proof, &client_signature);
        let stored_key = hash(self.mechanism, &client_key);
        let ok = stored_key.ct_eq(&self.credential.stored_key) & Choice::from(u8::from(self.known));
        if !bool::from(ok) {
            return Err(ScramError::InvalidCredentials);
        }
        let signature = hmac(
            self.mechanism,
            &self.credential.server_key,
            auth_message.as_bytes(),
        )?;
        Ok(format!("v={}", BASE64.encode(signature)).into_bytes())
    }
}

/// A credential for an unknown user: keyed by `secret`, stable per user,
/// shaped like a real one. It never verifies (the server also marks it).
fn mock_credential(
    mechanism: ScramMechanism,
    user: &str,
    secret: &[u8],
) -> Result<ScramCredential, ScramError> {
    let input = |label: &str| format!("keel-scram-mock {label}\0{}\0{user}", mechanism.name());
    Ok(ScramCredential {
        mechanism,
        salt: hmac(ScramMechanism::Sha256, secret, input("salt").as_bytes())?,
        iterations: mechanism.min_iterations(),
        stored_key: hmac(mechanism, secret, input("stored key").as_bytes())?,
        server_key: hmac(mechanism, secret, input("server key").as_bytes())?,
    })
}

// ---------------------------------------------------------------------------
// Client.

/// The client side of one exchange (used by Keel's own Kafka client in
/// tests and the fault harness).
#[derive(Clone)]
pub struct ScramClient {
    /// The mechanism to use.
    mechanism: ScramMechanism,
    /// The user to authenticate as.
    user: String,
    /// The password, used as given (no SASLprep).
    password: String,
    /// The client's part of the nonce.
    client_nonce: String,
    /// client-first-message-bare, for AuthMessage.
    client_first_bare: String,
    /// The server signature server-final must carry, once server-first is read.
    server_signature: Option<Vec<u8>>,
}

impl fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramClient")
            .field("mechanism", &self.mechanism)
            .field("user", &self.user)
            .field("client_nonce", &self.client_nonce)
            .finish_non_exhaustive()
    }
}

/// The gs2 header the client sends: no channel binding, no authzid.
const CLIENT_GS2_HEADER: &str = "n,,";

impl ScramClient {
    /// `client_nonce`: fresh random printable text (0x21..=0x7E, no `,`)
    /// supplied by the caller. An unusable nonce or user name is reported
    /// by [`ScramClient::server_first`] as [`ScramError::BadNonce`].
    pub fn new(mechanism: ScramMechanism, user: &str, password: &str, client_nonce: &str) -> Self {
        ScramClient {
            mechanism,
            user: user.to_string(),
            password: password.to_string(),
            client_nonce: client_nonce.to_string(),
            client_first_bare: format!("n={},r={client_nonce}", encode_saslname(user)),
            server_signature: None,
        }
    }

    /// The mechanism of this exchange.
    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// The client-first-message: `n,,n=<saslname>,r=<nonce>`.
    pub fn client_first(&self) -> Vec<u8> {
        format!("{CLIENT_GS2_HEADER}{}", self.client_first_bare).into_bytes()
    }

    /// Reads server-first; returns client-final (with the proof). Checks the
    /// server's nonce extends the client's, and the iteration count is within
    /// `[min_iterations, MAX_ITERATIONS]`. An `e=` message is reported as
    /// [`ScramError::ServerError`].
    pub fn server_first(&mut self, message: &[u8]) -> Result<Vec<u8>, ScramError> {
        check_nonce(&self.client_nonce).map_err(ScramError::BadNonce)?;
        check_user(&self.user).map_err(ScramError::BadNonce)?;
        let msg = as_message(message)?;
        if let Some(error) = msg.strip_prefix("e=") {
            return Err(ScramError::ServerError(error.to_string()));
        }
        let mut parts = msg.split(',');
        let first = parts.next();
        if first.is_some_and(|p| p.starts_with("m=")) {
            return Err(ScramError::Unsupported("mandatory extension m=".into()));
        }
        let nonce = attr(first, 'r', "nonce")?;
        check_nonce(nonce).map_err(malformed)?;
        if nonce.len() <= self.client_nonce.len() || !nonce.starts_with(&self.client_nonce) {
            return Err(ScramError::NonceMismatch);
        }
        let salt = decode_base64(attr(parts.next(), 's', "salt")?, "salt")?;
        if salt.is_empty() || salt.len() > MAX_SALT_LEN {
            return Err(malformed(format!(
                "salt of {} bytes, not within 1..={MAX_SALT_LEN}",
                salt.len()
            )));
        }
        let iterations = parse_iterations(attr(parts.next(), 'i', "iteration count")?)?;
        for part in parts {
            extension(part)?;
        }
        check_iterations(self.mechanism, iterations)?;

        let salted = hi(self.mechanism, self.password.as_bytes(), &salt, iterations)?;
        let client_key = hmac(self.mechanism, &salted, b"Client Key")?;
        let stored_key = hash(self.mechanism, &client_key);
        let without_proof = format!("c={},r={nonce}", BASE64.encode(CLIENT_GS2_HEADER));
        let auth_message = format!("{},{msg},{without_proof}", self.client_first_bare);
        let client_signature = hmac(self.mechanism, &stored_key, auth_message.as_bytes())?;
        let proof = xor(&client_key, &client_signature);
        let server_key = hmac(self.mechanism, &salted, b"Server Key")?;
        self.server_signature = Some(hmac(self.mechanism, &server_key, auth_message.as_bytes())?);
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Reads server-final; verifies the server signature (in constant time)
    /// or reports the server's `e=` error.
    pub fn server_final(&self, message: &[u8]) -> Result<(), ScramError> {
        let msg = as_message(message)?;
        let mut parts = msg.split(',');
        let first = parts.next();
        if let Some(error) = first.and_then(|p| p.strip_prefix("e=")) {
            return Err(ScramError::ServerError(error.to_string()));
        }
        let expected = self
            .server_signature
            .as_ref()
            .ok_or_else(|| ScramError::OutOfOrder("server-final before server-first".into()))?;
        let signature = decode_base64(attr(first, 'v', "server signature")?, "server signature")?;
        for part in parts {
            extension(part)?;
        }
        if bool::from(signature.ct_eq(expected)) {
            Ok(())
        } else {
            Err(ScramError::BadServerSignature)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    const ITER: u32 = 4096;

    fn cred(m: ScramMechanism, password: &str, salt: &[u8]) -> ScramCredential {
        ScramCredential::from_password(m, password.as_bytes(), salt, ITER).unwrap()
    }

    /// The server's verdict on client-final, and the client's on server-final
    /// (None when the server refused).
    type Verdicts = (Result<Vec<u8>, ScramError>, Option<Result<(), ScramError>>);

    /// Runs a whole exchange; returns the server's verdict and the client's.
    fn exchange(
        m: ScramMechanism,
        user: &str,
        client_password: &str,
        credential: Option<ScramCredential>,
        client_nonce: &str,
        server_nonce: &str,
    ) -> Verdicts {
        let mut client = ScramClient::new(m, user, client_password, client_nonce);
        let (server, server_first) =
            ScramServer::start(m, &client.client_first(), server_nonce, |u| {
                assert_eq!(u, user);
                credential
            })
            .unwrap();
        assert_eq!(server.user(), user);
        let client_final = client.server_first(&server_first).unwrap();
        let verdict = server.finish(&client_final);
        let client_verdict = verdict.as_ref().ok().map(|f| client.server_final(f));
        (verdict, client_verdict)
    }

    const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";

    /// One valid SHA-256 exchange, computed once (PBKDF2 is slow in debug builds).
    struct Fixture {
        credential: ScramCredential,
        fresh_client: ScramClient,
        client_first: Vec<u8>,
        server: ScramServer,
        server_first: Vec<u8>,
        client: ScramClient,
        client_final: Vec<u8>,
        server_final: Vec<u8>,
    }

    fn fixture() -> &'static Fixture {
        static F: OnceLock<Fixture> = OnceLock::new();
        F.get_or_init(|| {
            let m = ScramMechanism::Sha256;
            let credential = cred(m, "pencil", b"0123456789abcdef");
            let fresh_client = ScramClient::new(m, "us,er=", "pencil", "clientnonce");
            let client_first = fresh_client.client_first();
            let (server, server_first) =
                ScramServer::start(m, &client_first, SERVER_NONCE, |_| Some(credential.clone()))
                    .unwrap();
            let mut client = fresh_client.clone();
            let client_final = client.server_first(&server_first).unwrap();
            let server_final = server.clone().finish(&client_final).unwrap();
            client.server_final(&server_final).unwrap();
            Fixture {
                credential,
                fresh_client,
                client_first,
                server,
                server_first,
                client,
                client_final,
                server_final,
            }
        })
    }

    fn start_with(msg: &str) -> Result<(ScramServer, Vec<u8>), ScramError> {
        let credential = fixture().credential.clone();
        ScramServer::start(ScramMechanism::Sha256, msg.as_bytes(), SERVER_NONCE, |_| {
            Some(credential)
        })
    }

    #[test]
    fn mechanism_names_and_kafka_types() {
        for m in ScramMechanism::ALL {
            assert_eq!(ScramMechanism::from_name(m.name()), Some(m));
            assert_eq!(ScramMechanism::from_kafka_type(m.kafka_type()), Some(m));
            assert_eq!(m.to_string(), m.name());
            assert_eq!(m.min_iterations(), 4096);
        }
        assert_eq!(ScramMechanism::Sha256.name(), "SCRAM-SHA-256");
        assert_eq!(ScramMechanism::Sha512.name(), "SCRAM-SHA-512");
        assert_eq!(ScramMechanism::Sha256.kafka_type(), 1);
        assert_eq!(ScramMechanism::Sha512.kafka_type(), 2);
        assert_eq!(ScramMechanism::Sha256.hash_len(), 32);
        assert_eq!(ScramMechanism::Sha512.hash_len(), 64);
        assert_eq!(ScramMechanism::MAX_ITERATIONS, 16384);
        assert_eq!(ScramMechanism::from_kafka_type(0), None);
        assert_eq!(ScramMechanism::from_kafka_type(3), None);
        assert_eq!(ScramMechanism::from_name("scram-sha-256"), None);
        assert_eq!(ScramMechanism::from_name("SCRAM-SHA-1"), None);
    }

    #[test]
    fn mechanism_from_str_accepts_cli_spellings() {
        for (s, m) in [
            ("SCRAM-SHA-256", ScramMechanism::Sha256),
            ("scram-sha-256", ScramMechanism::Sha256),
            ("sha-256", ScramMechanism::Sha256),
            ("SHA-256", ScramMechanism::Sha256),
            ("SCRAM-SHA-512", ScramMechanism::Sha512),
            ("Scram-Sha-512", ScramMechanism::Sha512),
            ("sha-512", ScramMechanism::Sha512),
        ] {
            assert_eq!(s.parse::<ScramMechanism>(), Ok(m), "{s}");
        }
        let err = "md5".parse::<ScramMechanism>().unwrap_err();
        assert!(
            err.contains("SCRAM-SHA-256") && err.contains("SCRAM-SHA-512"),
            "{err}"
        );
        assert!("".parse::<ScramMechanism>().is_err());
    }

    #[test]
    fn rfc7677_sha256_vector_client_alone() {
        let m = ScramMechanism::Sha256;
        let mut client = ScramClient::new(m, "user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        assert_eq!(client.client_first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first =
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let client_final = client.server_first(server_first).unwrap();
        assert_eq!(
            String::from_utf8(client_final).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        client
            .server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
    }

    #[test]
    fn rfc7677_sha256_vector_client_and_server() {
        let m = ScramMechanism::Sha256;
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential = cred(m, "pencil", &salt);
        let mut client = ScramClient::new(m, "user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        let (server, server_first) =
            ScramServer::start(m, &client.client_first(), SERVER_NONCE, |u| {
                assert_eq!(u, "user");
                Some(credential)
            })
            .unwrap();
        assert_eq!(
            String::from_utf8(server_first.clone()).unwrap(),
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let client_final = client.server_first(&server_first).unwrap();
        assert_eq!(
            String::from_utf8(client_final.clone()).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        let server_final = server.finish(&client_final).unwrap();
        assert_eq!(
            String::from_utf8(server_final.clone()).unwrap(),
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        client.server_final(&server_final).unwrap();
    }

    #[test]
    fn credential_from_salted_password_matches_from_password() {
        for m in ScramMechanism::ALL {
            let salted = ScramCredential::salted_password(m, b"pw", b"salt", ITER).unwrap();
            assert_eq!(salted.len(), m.hash_len());
            let a = ScramCredential::from_salted_password(m, &salted, b"salt", ITER).unwrap();
            assert_eq!(a, cred(m, "pw", b"salt"));
            assert_eq!(a.validate(), Ok(()));
        }
    }

    #[test]
    fn sha512_round_trip() {
        let m = ScramMechanism::Sha512;
        let credential = cred(m, "s3cret", b"some salt");
        let (server, client) = exchange(
            m,
            "alice",
            "s3cret",
            Some(credential),
            "abcdefgh",
            "0123456789ABCDEFG",
        );
        let server_final = server.unwrap();
        assert!(server_final.starts_with(b"v="));
        assert_eq!(client, Some(Ok(())));
    }

    #[test]
    fn sha512_wrong_password() {
        let m = ScramMechanism::Sha512;
        let credential = cred(m, "s3cret", b"some salt");
        let (server, _) = exchange(
            m,
            "alice",
            "s3cret!",
            Some(credential),
            "abcdefgh",
            "0123456789ABCDEFG",
        );
        assert_eq!(server, Err(ScramError::InvalidCredentials));
    }

    #[test]
    fn unknown_user_same_error_as_wrong_password() {
        let m = ScramMechanism::Sha256;
        let credential = cred(m, "right", b"salt");
        let (wrong, _) = exchange(m, "bob", "wrong", Some(credential), "cn", SERVER_NONCE);
        let (unknown, _) = exchange(m, "bob", "right", None, "cn", SERVER_NONCE);
        assert_eq!(wrong, Err(ScramError::InvalidCredentials));
        assert_eq!(unknown, wrong);

        // The mock server-first looks like a real one, stable per user, and
        // keyed by the mock secret when one is given.
        let client = ScramClient::new(m, "bob", "x", "cn");
        let mock = |secret: &[u8]| {
            ScramServer::start_with_mock_secret(
                m,
                &client.client_first(),
                SERVER_NONCE,
                secret,
                |_| None,
            )
            .unwrap()
            .1
        };
        let first = String::from_utf8(mock(b"")).unwrap();
        assert!(
            first.starts_with("r=cn%hvYD") && first.ends_with(",i=4096"),
            "{first}"
        );
        assert_eq!(mock(b""), mock(b""));
        assert_ne!(mock(b""), mock(b"cluster secret"));
    }

    #[test]
    fn authzid_equal_to_user_accepted_else_refused() {
        let f = fixture();
        // The fixture's user is "us,er=": its saslname is "us=2Cer=3D".
        let ok = "n,a=us=2Cer=3D,n=us=2Cer=3D,r=clientnonce";
        let (server, _) = start_with(ok).unwrap();
        assert_eq!(server.user(), "us,er=");
        assert!(matches!(
            start_with("n,a=admin,n=us=2Cer=3D,r=clientnonce"),
            Err(ScramError::Unsupported(_))
        ));
        // c= must then carry that header, not "n,,".
        let cf = String::from_utf8(f.client_final.clone()).unwrap();
        assert!(matches!(
            server.finish(cf.as_bytes()),
            Err(ScramError::ChannelBinding(_))
        ));
    }

    #[test]
    fn channel_binding_p_refused() {
        assert!(matches!(
            start_with("p=tls-unique,,n=user,r=abc"),
            Err(ScramError::ChannelBinding(_))
        ));
        assert!(matches!(
            start_with("x,,n=user,r=abc"),
            Err(ScramError::Malformed(_))
        ));
    }

    #[test]
    fn y_flag_accepted_and_c_must_match_it() {
        let f = fixture();
        let (server, _) = start_with("y,,n=us=2Cer=3D,r=clientnonce").unwrap();
        // The fixture client sent "n,,", so its c=biws does not match "y,,".
        assert!(matches!(
            server.finish(&f.client_final),
            Err(ScramError::ChannelBinding(_))
        ));
        assert_eq!(BASE64.encode("y,,"), "eSws");
    }

    #[test]
    fn tokenauth_true_refused_other_extensions_ignored() {
        for t in ["tokenauth=true", "tokenauth=TRUE"] {
            assert!(matches!(
                start_with(&format!("n,,n=us=2Cer=3D,r=clientnonce,{t}")),
                Err(ScramError::Unsupported(_))
            ));
        }
        let (server, first) =
            start_with("n,,n=us=2Cer=3D,r=clientnonce,tokenauth=false,foo=bar=baz").unwrap();
        assert_eq!(first, fixture().server_first);
        // The extensions are not part of client-first-bare the client signed,
        // so the fixture's proof does not verify here.
        assert_eq!(
            server.finish(&fixture().client_final),
            Err(ScramError::InvalidCredentials)
        );
        for bad in ["=x", "foo", "foo=", "f0o=1", "n=dup", "p=x"] {
            assert!(
                matches!(
                    start_with(&format!("n,,n=user,r=abc,{bad}")),
                    Err(ScramError::Malformed(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn mandatory_extension_refused() {
        assert!(matches!(
            start_with("n,,m=ext,n=user,r=abc"),
            Err(ScramError::Unsupported(_))
        ));
        let mut client = fixture().fresh_client.clone();
        assert!(matches!(
            client.server_first(b"m=ext,r=clientnonceX,s=c2FsdA==,i=4096"),
            Err(ScramError::Unsupported(_))
        ));
    }

    #[test]
    fn client_refuses_iterations_out_of_range() {
        let f = fixture();
        for (i, want) in [
            ("4095", Some(4095)),
            ("16385", Some(16385)),
            ("1", Some(1)),
            ("4294967295", Some(u32::MAX)),
            ("4294967296", None),
            ("99999999999999999999", None),
            ("0", None),
            ("04096", None),
            ("+4096", None),
            ("", None),
        ] {
            let mut client = f.fresh_client.clone();
            let msg = format!("r=clientnonceXYZ,s=c2FsdA==,i={i}");
            let got = client.server_first(msg.as_bytes());
            match want {
                Some(n) => assert_eq!(
                    got,
                    Err(ScramError::BadIterations {
                        got: n,
                        min: 4096,
                        max: 16384
                    })
                ),
                None => assert!(matches!(got, Err(ScramError::Malformed(_))), "{i}: {got:?}"),
            }
        }
    }

    #[test]
    fn validate_refuses_bad_shapes() {
        let good = fixture().credential.clone();
        assert_eq!(good.validate(), Ok(()));
        for iterations in [0, 4095, 16385, u32::MAX] {
            let c = ScramCredential {
                iterations,
                ..good.clone()
            };
            assert!(matches!(
                c.validate(),
                Err(ScramError::BadIterations { .. })
            ));
            assert!(matches!(
                ScramCredential::salted_password(ScramMechanism::Sha256, b"p", b"s", iterations),
                Err(ScramError::BadIterations { .. })
            ));
        }
        let bad = [
            ScramCredential {
                salt: vec![],
                ..good.clone()
            },
            ScramCredential {
                salt: vec![1; MAX_SALT_LEN + 1],
                ..good.clone()
            },
            ScramCredential {
                stored_key: vec![0; 31],
                ..good.clone()
            },
            ScramCredential {
                server_key: vec![0; 64],
                ..good.clone()
            },
            ScramCredential {
                mechanism: ScramMechanism::Sha512,
                ..good.clone()
            },
        ];
        for c in bad {
            assert!(
                matches!(c.validate(), Err(ScramError::BadCredential(_))),
                "{c:?}"
            );
        }
        assert!(ScramCredential {
            salt: vec![1; MAX_SALT_LEN],
            ..good.clone()
        }
        .validate()
        .is_ok());
        assert!(matches!(
            ScramCredential::from_salted_password(ScramMechanism::Sha512, &[0; 32], b"s", ITER),
            Err(ScramError::BadCredential(_))
        ));
        assert!(matches!(
            ScramCredential::from_salted_password(ScramMechanism::Sha256, &[0; 32], b"", ITER),
            Err(ScramError::BadCredential(_))
        ));
    }

    #[test]
    fn server_refuses_invalid_stored_credential() {
        let f = fixture();
        let wrong_mech = ScramServer::start(
            ScramMechanism::Sha512,
            &f.client_first,
            SERVER_NONCE,
            |_| Some(f.credential.clone()),
        );
        assert!(matches!(wrong_mech, Err(ScramError::BadCredential(_))));
        let short_key = ScramCredential {
            stored_key: vec![1, 2, 3],
            ..f.credential.clone()
        };
        let got = ScramServer::start(
            ScramMechanism::Sha256,
            &f.client_first,
            SERVER_NONCE,
            |_| Some(short_key),
        );
        assert!(matches!(got, Err(ScramError::BadCredential(_))));
    }

    #[test]
    fn oversized_message_refused() {
        let f = fixture();
        let long_user = "u".repeat(MAX_MESSAGE_LEN);
        let too_long = format!("n,,n={long_user},r=abc");
        assert!(matches!(
            start_with(&too_long),
            Err(ScramError::TooLong { max: 4096, .. })
        ));
        let user_1025 = format!("n,,n={},r=abc", "u".repeat(MAX_USER_LEN + 1));
        assert!(matches!(
            start_with(&user_1025),
            Err(ScramError::Malformed(_))
        ));
        let user_1024 = format!("n,,n={},r=abc", "u".repeat(MAX_USER_LEN));
        assert!(start_with(&user_1024).is_ok());

        let big = vec![b'a'; MAX_MESSAGE_LEN + 1];
        assert!(matches!(
            f.server.clone().finish(&big),
            Err(ScramError::TooLong { .. })
        ));
        assert!(matches!(
            f.fresh_client.clone().server_first(&big),
            Err(ScramError::TooLong { .. })
        ));
        assert!(matches!(
            f.client.server_final(&big),
            Err(ScramError::TooLong { .. })
        ));
    }

    #[test]
    fn saslname_round_trip_and_bad_escapes() {
        for user in ["plain", "a,b", "a=b", "=2C", ",=,=", "ünï,cødé="] {
            let enc = encode_saslname(user);
            assert!(!enc.contains(','));
            assert_eq!(decode_saslname(&enc).as_deref(), Ok(user));
        }
        assert_eq!(encode_saslname("a,b=c"), "a=2Cb=3Dc");
        for bad in [
            "", "=", "a=", "a=2", "a=2c", "a=3d", "a=41", "a\0b", "=2", "=é",
        ] {
            assert!(
                matches!(decode_saslname(bad), Err(ScramError::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn client_reports_server_error() {
        let f = fixture();
        assert_eq!(
            f.client.server_final(b"e=invalid-proof"),
            Err(ScramError::ServerError("invalid-proof".into()))
        );
        assert_eq!(
            f.fresh_client.clone().server_first(b"e=unknown-user"),
            Err(ScramError::ServerError("unknown-user".into()))
        );
        assert_eq!(
            f.fresh_client.server_final(b"e=other-error"),
            Err(ScramError::ServerError("other-error".into()))
        );
    }

    #[test]
    fn client_checks_server_nonce_and_signature() {
        let f = fixture();
        let mut client = f.fresh_client.clone();
        for nonce in ["clientnonce", "otherclientnonceX", "clientnoncX"] {
            let msg = format!("r={nonce},s=c2FsdA==,i=4096");
            assert_eq!(
                client.server_first(msg.as_bytes()),
                Err(ScramError::NonceMismatch),
                "{nonce}"
            );
        }
        assert_eq!(f.client.server_final(&f.server_final), Ok(()));
        let mut sig = BASE64.decode(&f.server_final[2..]).unwrap();
        sig[0] ^= 1;
        let forged = format!("v={}", BASE64.encode(sig));
        assert_eq!(
            f.client.server_final(forged.as_bytes()),
            Err(ScramError::BadServerSignature)
        );
        assert_eq!(
            f.client.server_final(b"v=AAAA"),
            Err(ScramError::BadServerSignature)
        );
        assert_eq!(
            f.fresh_client.server_final(&f.server_final),
            Err(ScramError::OutOfOrder(
                "server-final before server-first".into()
            ))
        );
    }

    #[test]
    fn caller_nonces_checked() {
        let f = fixture();
        for bad in [
            "short",
            "has,comma-long-enough",
            "has space long enough",
            "ünïcødé-long-enough",
        ] {
            assert!(
                matches!(
                    ScramServer::start(ScramMechanism::Sha256, &f.client_first, bad, |_| None),
                    Err(ScramError::BadNonce(_))
                ),
                "{bad}"
            );
        }
        let mut client = ScramClient::new(ScramMechanism::Sha256, "u", "p", "bad,nonce");
        assert!(matches!(
            client.server_first(&f.server_first),
            Err(ScramError::BadNonce(_))
        ));
        let mut client = ScramClient::new(ScramMechanism::Sha256, "", "p", "nonce");
        assert!(matches!(
            client.server_first(&f.server_first),
            Err(ScramError::BadNonce(_))
        ));
    }

    #[test]
    fn bad_base64_is_malformed() {
        let f = fixture();
        let nonce = format!("clientnonce{SERVER_NONCE}");
        for cf in [
            format!("c=biw,r={nonce},p=AAAA"),
            format!("c=biws,r={nonce},p=A"),
            format!("c=biws,r={nonce},p=!!!!"),
            format!("c=biws,r={nonce},p=AAAA"),
        ] {
            assert!(
                matches!(
                    f.server.clone().finish(cf.as_bytes()),
                    Err(ScramError::Malformed(_))
                ),
                "{cf}"
            );
        }
        let mut client = f.fresh_client.clone();
        assert!(matches!(
            client.server_first(b"r=clientnonceX,s=c2FsdA=,i=4096"),
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            client.server_first(b"r=clientnonceX,s=,i=4096"),
            Err(ScramError::Malformed(_))
        ));
        assert!(matches!(
            f.client.server_final(b"v=%%%"),
            Err(ScramError::Malformed(_))
        ));
    }

    #[test]
    fn same_client_final_verifies_only_with_same_nonce() {
        // Same client-final against a fresh server with the same nonce
        // verifies (the check is the nonce), with another nonce it fails.
        let f = fixture();
        let credential = f.credential.clone();
        let again = ScramServer::start(
            ScramMechanism::Sha256,
            &f.client_first,
            SERVER_NONCE,
            |_| Some(credential),
        )
        .unwrap()
        .0;
        assert_eq!(again.finish(&f.client_final), Ok(f.server_final.clone()));
    }

    /// The client-final of librdkafka before 2.1: its own nonce again in
    /// front of the combined one, with a proof over the message as sent.
    fn librdkafka_final(
        m: ScramMechanism,
        password: &str,
        credential: &ScramCredential,
        client_first_bare: &str,
        server_first: &str,
        nonce: &str,
    ) -> Vec<u8> {
        let salted = ScramCredential::salted_password(
            m,
            password.as_bytes(),
            &credential.salt,
            credential.iterations,
        )
        .unwrap();
        let client_key = hmac(m, &salted, b"Client Key").unwrap();
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{client_first_bare},{server_first},{without_proof}");
        let signature = hmac(m, &hash(m, &client_key), auth.as_bytes()).unwrap();
        let proof = xor(&client_key, &signature);
        format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes()
    }

    #[test]
    fn librdkafkas_repeated_client_nonce_is_taken_in_that_form_only() {
        let m = ScramMechanism::Sha512;
        let credential = ScramCredential::from_password(m, b"pw", b"salt-salt", 4096).unwrap();
        let client_nonce = "jalgWSyXKu^P2qF@;n{Y:V~`dJdD8U=S";
        let bare = format!("n=alice,r={client_nonce}");
        let start = || {
            let c = credential.clone();
            ScramServer::start(m, format!("n,,{bare}").as_bytes(), SERVER_NONCE, |_| {
                Some(c)
            })
            .unwrap()
        };
        let (server, first) = start();
        let first = String::from_utf8(first).unwrap();
        let combined = format!("{client_nonce}{SERVER_NONCE}");
        let doubled = format!("{client_nonce}{combined}");
        let last = librdkafka_final(m, "pw", &credential, &bare, &first, &doubled);
        assert!(server.finish(&last).is_ok(), "librdkafka's form logs in");
        // Anything else around the combined nonce is still a mismatch.
        for other in [format!("x{combined}"), format!("{combined}{client_nonce}")] {
            let (server, first) = start();
            let first = String::from_utf8(first).unwrap();
            let last = librdkafka_final(m, "pw", &credential, &bare, &first, &other);
            assert_eq!(
                server.finish(&last),
                Err(ScramError::NonceMismatch),
                "{other}"
            );
        }
        // And the proof still has to be right.
        let (server, first) = start();
        let first = String::from_utf8(first).unwrap();
        let last = librdkafka_final(m, "guess", &credential, &bare, &first, &doubled);
        assert_eq!(server.finish(&last), Err(ScramError::InvalidCredentials));
    }

    /// A client nonce: printable ASCII without ','.
    const CLIENT_NONCE_RE: &str = "[\\x21-\\x2B\\x2D-\\x7E]{1,40}";
    /// A server nonce: printable ASCII without ',', at least 16 characters.
    const SERVER_NONCE_RE: &str = "[\\x21-\\x2B\\x2D-\\x7E]{16,40}";

    fn mechanism() -> impl Strategy<Value = ScramMechanism> {
        prop_oneof![Just(ScramMechanism::Sha256), Just(ScramMechanism::Sha512)]
    }

    fn user_name() -> impl Strategy<Value = String> {
        prop_oneof!["[a-z,=]{1,16}", "[^\\x00]{1,24}"]
    }

    /// Random bytes, or fragments of SCRAM messages glued together.
    fn fuzz_bytes() -> impl Strategy<Value = Vec<u8>> {
        const TOKENS: &[&[u8]] = &[
            b"n",
            b"y",
            b"p=tls",
            b",",
            b"=",
            b"a=",
            b"n=",
            b"r=",
            b"s=",
            b"i=",
            b"c=",
            b"p=",
            b"v=",
            b"e=",
            b"m=",
            b"biws",
            b"eSws",
            b"=2C",
            b"=3D",
            b"=2c",
            b"us",
            b"4096",
            b"0",
            b"99999999999",
            b"c2FsdA==",
            b"AAAA",
            b"clientnonce",
            SERVER_NONCE.as_bytes(),
            b"tokenauth=true",
            b"x=y",
            b"\0",
            b"\xff",
            b"\xc3\xa9",
            b"\xe2\x82",
        ];
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..8192),
            proptest::collection::vec(proptest::sample::select(TOKENS), 0..48)
                .prop_map(|parts| parts.concat()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        #[test]
        fn prop_client_and_server_agree(
            m in mechanism(),
            user in user_name(),
            password in any::<String>(),
            salt in proptest::collection::vec(any::<u8>(), 1..64),
            client_nonce in CLIENT_NONCE_RE,
            server_nonce in SERVER_NONCE_RE,
        ) {
            let credential =
                ScramCredential::from_password(m, password.as_bytes(), &salt, ITER).unwrap();
            let (server, client) =
                exchange(m, &user, &password, Some(credential), &client_nonce, &server_nonce);
            prop_assert!(server.is_ok());
            prop_assert_eq!(client, Some(Ok(())));
        }

        #[test]
        fn prop_wrong_password_fails(
            m in mechanism(),
            user in user_name(),
            password in any::<String>(),
            wrong in any::<String>(),
            client_nonce in CLIENT_NONCE_RE,
            server_nonce in SERVER_NONCE_RE,
        ) {
            prop_assume!(password != wrong);
            let credential =
                ScramCredential::from_password(m, password.as_bytes(), b"salt", ITER).unwrap();
            let (server, _) =
                exchange(m, &user, &wrong, Some(credential), &client_nonce, &server_nonce);
            prop_assert_eq!(server, Err(ScramError::InvalidCredentials));
        }

        #[test]
        fn prop_replayed_client_final_fails(
            server_nonce in SERVER_NONCE_RE,
        ) {
            prop_assume!(server_nonce.as_str() != SERVER_NONCE);
            let f = fixture();
            let credential = f.credential.clone();
            let (server, _) =
                ScramServer::start(ScramMechanism::Sha256, &f.client_first, &server_nonce, |_| {
                    Some(credential)
                })
                .unwrap();
            prop_assert_eq!(server.finish(&f.client_final), Err(ScramError::NonceMismatch));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn prop_arbitrary_bytes_never_panic(bytes in fuzz_bytes()) {
            let f = fixture();
            let credential = f.credential.clone();
            if let Ok((_, first)) =
                ScramServer::start(ScramMechanism::Sha256, &bytes, SERVER_NONCE, |_| Some(credential))
            {
                prop_assert!(first.starts_with(b"r="));
            }
            prop_assert!(f.server.clone().finish(&bytes).is_err());
            if let Ok(last) = f.fresh_client.clone().server_first(&bytes) {
                prop_assert!(last.starts_with(b"c=biws,r=clientnonce"));
            }
            prop_assert!(f.client.server_final(&bytes).is_err());
        }

        #[test]
        fn prop_truncated_client_final_fails(cut in any::<proptest::sample::Index>()) {
            let f = fixture();
            let len = cut.index(f.client_final.len());
            prop_assert!(f.server.clone().finish(&f.client_final[..len]).is_err());
        }

        #[test]
        fn prop_flipped_client_final_fails(
            at in any::<proptest::sample::Index>(),
            mask in 1u8..=255,
        ) {
            let f = fixture();
            let mut msg = f.client_final.clone();
            let i = at.index(msg.len());
            msg[i] ^= mask;
            prop_assert!(f.server.clone().finish(&msg).is_err());
        }
    }
}
