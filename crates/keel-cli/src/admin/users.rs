//! `keel users`: users' SCRAM credentials (create, delete, list), as
//! Kafka's `kafka-configs --entity-type users` sets them.
//!
//! The password never leaves this process: the CLI draws a fresh 32-byte
//! salt from the operating system's random source, salts and hashes the
//! password (PBKDF2, the iterations asked for) and sends the salt and the
//! salted password; the controller derives and keeps the keys.

use std::collections::BTreeSet;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgGroup, Args, Subcommand};
use keel_metadata::scram::{ScramCredential, ScramMechanism};
use keel_proto::client::ControllerClient;
use keel_proto::convert::{scram_deletion_to_pb, scram_mechanism_from_pb, scram_upsertion_to_pb};
use keel_proto::pb;
use rand::TryRngCore;
use serde_json::json;

use super::{item_error, usage, Common};
use crate::output::{self, Output};

#[derive(Args, Debug)]
pub struct UsersArgs {
    #[command(subcommand)]
    cmd: UsersCmd,
    #[command(flatten)]
    common: Common,
}

/// Where the password comes from: exactly one of these.
#[derive(Args, Debug, Clone)]
#[command(group(
    ArgGroup::new("secret")
        .args(["password", "password_file", "password_stdin"])
        .required(true)
))]
struct PasswordArgs {
    /// The password itself. Visible to every local user in `ps` and kept
    /// in shell history: prefer --password-file or --password-stdin.
    #[arg(long)]
    password: Option<String>,
    /// Read the password from the first line of this file.
    #[arg(long, value_name = "FILE")]
    password_file: Option<PathBuf>,
    /// Read the password from the first line of standard input.
    #[arg(long)]
    password_stdin: bool,
}

impl PasswordArgs {
    /// The password given (its line's end taken off), or why there is none.
    fn read(&self) -> Result<String, String> {
        let line = if let Some(p) = &self.password {
            p.clone()
        } else if let Some(f) = &self.password_file {
            let text = std::fs::read_to_string(f)
                .map_err(|e| format!("cannot read --password-file {}: {e}", f.display()))?;
            text.lines().next().unwrap_or_default().to_string()
        } else {
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .map_err(|e| format!("cannot read the password from standard input: {e}"))?;
            line
        };
        let password = line.trim_end_matches(['\r', '\n']).to_string();
        if password.is_empty() {
            return Err("the password is empty".into());
        }
        Ok(password)
    }
}

/// `SCRAM-SHA-256`, `SCRAM-SHA-512` (any case, `sha-512` too) or `all`.
#[derive(Clone, Debug)]
enum MechanismChoice {
    One(ScramMechanism),
    All,
}

fn parse_mechanism(s: &str) -> Result<MechanismChoice, String> {
    if s.eq_ignore_ascii_case("all") {
        return Ok(MechanismChoice::All);
    }
    s.parse().map(MechanismChoice::One)
}

/// The mechanisms chosen (each once, in order); `None` when none was.
fn mechanisms(chosen: &[MechanismChoice]) -> Option<Vec<ScramMechanism>> {
    if chosen.is_empty() {
        return None;
    }
    let mut set = BTreeSet::new();
    for c in chosen {
        match c {
            MechanismChoice::One(m) => {
                set.insert(*m);
            }
            MechanismChoice::All => set.extend(ScramMechanism::ALL),
        }
    }
    Some(set.into_iter().collect())
}

#[derive(Subcommand, Debug)]
enum UsersCmd {
    /// Set a user's SCRAM credential (adding it, or replacing its
    /// password), one mechanism at a time.
    #[command(
        after_help = "Examples:\n  keel users create --user alice --password-file alice.pw\n  printf '%s\\n' \"$PW\" | keel users create --user alice --mechanism all --iterations 8192 --password-stdin\n\nThe password is salted and hashed here; only the salt and the salted password are sent.\nEach mechanism is a request of its own (Kafka refuses a user named twice in one):\nif one fails, the ones before it stay set."
    )]
    Create {
        /// The user (as in User:NAME): 1-128 of letters, digits, `.`, `_`,
        /// `-`, `@`.
        #[arg(long)]
        user: String,
        /// SCRAM-SHA-256, SCRAM-SHA-512 (the default) or all; repeatable.
        #[arg(long, value_parser = parse_mechanism, value_name = "MECHANISM")]
        mechanism: Vec<MechanismChoice>,
        /// PBKDF2 iterations, 4096 to 16384: more make a stolen credential
        /// harder to crack and every login slower.
        #[arg(long, default_value_t = 4096)]
        iterations: u32,
        #[command(flatten)]
        password: PasswordArgs,
    },
    /// Remove a user's SCRAM credentials: every one it has, or those of
    /// the mechanisms named.
    #[command(
        after_help = "Examples:\n  keel users delete --user alice\n  keel users delete --user alice --mechanism SCRAM-SHA-256"
    )]
    Delete {
        /// The user.
        #[arg(long)]
        user: String,
        /// SCRAM-SHA-256, SCRAM-SHA-512 or all (the default: every one the
        /// user has); repeatable.
        #[arg(long, value_parser = parse_mechanism, value_name = "MECHANISM")]
        mechanism: Vec<MechanismChoice>,
    },
    /// List users' SCRAM credentials: mechanism and iterations (never
    /// salts or keys).
    #[command(after_help = "Examples:\n  keel users list\n  keel users list --user alice -o json")]
    List {
        /// Only this user (RESOURCE_NOT_FOUND when it has no credential);
        /// repeatable.
        #[arg(long)]
        user: Vec<String>,
    },
}

/// A fresh 32-byte salt from the operating system's random source.
fn fresh_salt() -> Result<[u8; 32], String> {
    let mut salt = [0u8; 32];
    rand::rngs::OsRng
        .try_fill_bytes(&mut salt)
        .map_err(|e| format!("cannot draw a random salt from the operating system: {e}"))?;
    Ok(salt)
}

/// The name of a mechanism as the wire numbers it (the number itself when
/// this CLI does not know it).
fn mechanism_name(v: i32) -> String {
    scram_mechanism_from_pb(v).map_or_else(|_| format!("mechanism {v}"), |m| m.name().to_string())
}

/// Sends one AlterUserScramCredentials request; on a refusal (of the call
/// or of its one item) prints it and returns the exit code.
async fn alter(
    client: &ControllerClient,
    req: pb::AlterUserScramCredentialsRequest,
) -> Result<(), ExitCode> {
    let r = try_call!(client, admin_write, alter_user_scram_credentials, req)?;
    match r.results.first().and_then(|r| item_error(&r.error)) {
        Some(e) => Err(output::refused(&e)),
        None => Ok(()),
    }
}

/// The credentials of `users` (all users when empty); on a refusal prints
/// it and returns the exit code.
async fn describe(
    client: &ControllerClient,
    users: Vec<String>,
) -> Result<Vec<pb::UserScramCredentials>, ExitCode> {
    let req = pb::DescribeUserScramCredentialsRequest { users };
    let r = try_call!(client, admin, describe_user_scram_credentials, req)?;
    match r.results.iter().find_map(|u| item_error(&u.error)) {
        Some(e) => Err(output::refused(&e)),
        None => Ok(r.results),
    }
}

/// Runs `keel users`: create, delete or list SCRAM credentials.
pub async fn users(a: UsersArgs) -> ExitCode {
    let client = match a.common.client() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let out = a.common.output;
    match a.cmd {
        UsersCmd::Create {
            user,
            mechanism,
            iterations,
            password,
        } => create(&client, out, user, &mechanism, iterations, password).await,
        UsersCmd::Delete { user, mechanism } => delete(&client, out, user, &mechanism).await,
        UsersCmd::List { user } => list(&client, out, user).await,
    }
}

/// `users create`: sets the user's credential, one request per mechanism.
async fn create(
    client: &ControllerClient,
    out: Output,
    user: String,
    mechanism: &[MechanismChoice],
    iterations: u32,
    password: PasswordArgs,
) -> ExitCode {
    let mechanisms = mechanisms(mechanism).unwrap_or(vec![ScramMechanism::Sha512]);
    // Checked here: PBKDF2 with a huge count would run for hours.
    let (min, max) = (4096, ScramMechanism::MAX_ITERATIONS);
    if !(min..=max).contains(&iterations) {
        return usage(format!(
            "--iterations {iterations} is out of range: {min} to {max}"
        ));
    }
    let password = match password.read() {
        Ok(p) => p,
        Err(why) => return usage(why),
    };
    let mut set = Vec::new();
    for m in mechanisms {
        let salt = match fresh_salt() {
            Ok(s) => s,
            Err(why) => {
                output::error("LOCAL", &why.to_string(), "");
                return ExitCode::from(crate::EXIT_LOCAL);
            }
        };
        let salted =
            match ScramCredential::salted_password(m, password.as_bytes(), &salt, iterations) {
                Ok(s) => s,
                Err(e) => return usage(e),
            };
        let req = pb::AlterUserScramCredentialsRequest {
            upsertions: vec![scram_upsertion_to_pb(&user, m, iterations, &salt, &salted)],
            deletions: vec![],
        };
        if let Err(code) = alter(client, req).await {
            return code;
        }
        if out == Output::Table {
            crate::outln!(
                "Set the {} credential of user {user} ({iterations} iterations).",
                m.name()
            );
        }
        set.push(json!({ "mechanism": m.name(), "iterations": iterations }));
    }
    if out == Output::Json {
        output::json(&json!({ "user": user, "set": set }));
    }
    ExitCode::SUCCESS
}

/// `users delete`: removes the credentials of the mechanisms named, or
/// every one the user has.
async fn delete(
    client: &ControllerClient,
    out: Output,
    user: String,
    mechanism: &[MechanismChoice],
) -> ExitCode {
    let chosen = match mechanisms(mechanism) {
        Some(m) => m,
        // Every one the user has (RESOURCE_NOT_FOUND if none).
        None => match describe(client, vec![user.clone()]).await {
            Ok(found) => found
                .iter()
                .flat_map(|u| &u.credentials)
                .filter_map(|c| scram_mechanism_from_pb(c.mechanism).ok())
                .collect(),
            Err(code) => return code,
        },
    };
    let mut deleted = Vec::new();
    for m in chosen {
        let req = pb::AlterUserScramCredentialsRequest {
            upsertions: vec![],
            deletions: vec![scram_deletion_to_pb(&user, m)],
        };
        if let Err(code) = alter(client, req).await {
            return code;
        }
        if out == Output::Table {
            crate::outln!("Deleted the {} credential of user {user}.", m.name());
        }
        deleted.push(m.name());
    }
    if out == Output::Json {
        output::json(&json!({ "user": user, "deleted": deleted }));
    }
    ExitCode::SUCCESS
}

/// `users list`: the credentials of `user` (every user when empty).
async fn list(client: &ControllerClient, out: Output, user: Vec<String>) -> ExitCode {
    let found = match describe(client, user).await {
        Ok(f) => f,
        Err(code) => return code,
    };
    match out {
        Output::Json => output::json(&json!({
            "users": found.iter().map(|u| json!({
                "user": u.user,
                "credentials": u.credentials.iter().map(|c| json!({
                    "mechanism": mechanism_name(c.mechanism),
                    "iterations": c.iterations,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })),
        Output::Table => print_credentials(&found),
    }
    ExitCode::SUCCESS
}

/// The `users list` table: a row per user and mechanism.
fn print_credentials(found: &[pb::UserScramCredentials]) {
    let rows: Vec<Vec<String>> = found
        .iter()
        .flat_map(|u| {
            u.credentials.iter().map(|c| {
                vec![
                    u.user.clone(),
                    mechanism_name(c.mechanism),
                    c.iterations.to_string(),
                ]
            })
        })
        .collect();
    output::table(&["USER", "MECHANISM", "ITERATIONS"], &rows);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mechanisms_are_named_as_kafka_does_or_all() {
        let parse = |v: &[&str]| {
            let chosen: Vec<MechanismChoice> =
                v.iter().map(|s| parse_mechanism(s).unwrap()).collect();
            mechanisms(&chosen)
        };
        assert_eq!(parse(&[]), None);
        assert_eq!(
            parse(&["SCRAM-SHA-512"]),
            Some(vec![ScramMechanism::Sha512])
        );
        assert_eq!(
            parse(&["scram-sha-512", "SCRAM-SHA-256", "sha-512"]),
            Some(vec![ScramMechanism::Sha256, ScramMechanism::Sha512])
        );
        assert_eq!(parse(&["ALL"]), Some(ScramMechanism::ALL.to_vec()));
        assert!(parse_mechanism("SCRAM-SHA-1").is_err());
    }

    #[test]
    fn salts_are_fresh() {
        assert_ne!(fresh_salt().unwrap(), fresh_salt().unwrap());
    }
}
