//! Input validation shared by the decide functions: topic names (Kafka's
//! rules) and topic configs (Kafka's schema, see [`crate::topic_config`],
//! plus what depends on the topic, like `min.insync.replicas` against the
//! replication factor).

use crate::error::{ApiError, ErrorCode};
use crate::topic_config::UnknownConfigs;
use crate::{MIN_INSYNC_REPLICAS, UNCLEAN_LEADER_ELECTION};

/// Longest topic name Kafka accepts (a partition dir name must fit 255 bytes).
pub const MAX_TOPIC_NAME_LEN: usize = 249;

/// Kafka's topic name rules: 1–249 characters of `[a-zA-Z0-9._-]`, and not
/// `.` or `..` (they would name the log dir's parent).
pub fn validate_topic_name(name: &str) -> Result<(), ApiError> {
    let bad = |why: String| Err(ApiError::new(ErrorCode::InvalidTopicName, why));
    if name.is_empty() {
        return bad("topic name is empty".into());
    }
    if name == "." || name == ".." {
        return bad(format!("topic name {name:?} is reserved"));
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return bad(format!(
            "topic name is {} characters long; at most {MAX_TOPIC_NAME_LEN} are allowed",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return bad(format!(
            "topic name {name:?} contains {c:?}; only ASCII letters, digits, '.', '_' and '-' are allowed"
        ));
    }
    Ok(())
}

/// Checks topic configs against Kafka's schema (unknown names as
/// `unknown` says), for a topic whose partitions have `replication_factor`
/// replicas.
pub fn validate_topic_configs<K: AsRef<str>, V: AsRef<str>>(
    configs: impl IntoIterator<Item = (K, V)>,
    replication_factor: u32,
    unknown: UnknownConfigs,
) -> Result<(), ApiError> {
    let bad = |why: String| Err(ApiError::new(ErrorCode::InvalidConfig, why));
    for (key, value) in configs {
        let (key, value) = (key.as_ref(), value.as_ref());
        if key.is_empty() {
            return bad("config key is empty".into());
        }
        crate::topic_config::check(key, value, unknown)?;
        if key == UNCLEAN_LEADER_ELECTION
            && !(value.eq_ignore_ascii_case("true") || value.eq_ignore_ascii_case("false"))
        {
            return bad(format!("{key} must be true or false, not {value:?}"));
        }
        if key == MIN_INSYNC_REPLICAS {
            match value.trim().parse::<u32>() {
                Ok(n) if n >= 1 && n <= replication_factor => {}
                Ok(n) if n >= 1 => {
                    return bad(format!(
                        "{key}={n} exceeds the replication factor {replication_factor}"
                    ))
                }
                _ => return bad(format!("{key} must be a positive integer, not {value:?}")),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn topic_names_follow_kafka_rules() {
        for ok in ["a", "orders", "orders.v2", "a_b-c", &"x".repeat(249)] {
            assert!(validate_topic_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "a b", "é", "a/b", &"x".repeat(250)] {
            let e = validate_topic_name(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidTopicName, "{bad}");
        }
    }

    #[test]
    fn configs_follow_the_schema_and_unknown_names_only_pass_when_allowed() {
        let cfg = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        let refuse = UnknownConfigs::Refuse;
        assert!(validate_topic_configs(&cfg(UNCLEAN_LEADER_ELECTION, "TRUE"), 3, refuse).is_ok());
        assert!(validate_topic_configs(&cfg(UNCLEAN_LEADER_ELECTION, "yes"), 3, refuse).is_err());
        assert!(validate_topic_configs(&cfg(MIN_INSYNC_REPLICAS, "2"), 3, refuse).is_ok());
        for v in ["0", "4", "-1", "two"] {
            let e = validate_topic_configs(&cfg(MIN_INSYNC_REPLICAS, v), 3, refuse).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidConfig, "{v}");
        }
        assert!(validate_topic_configs(&cfg("retention.ms", "anything"), 1, refuse).is_err());
        assert!(validate_topic_configs(&cfg("retention.ms", "1000"), 1, refuse).is_ok());
        assert!(validate_topic_configs(&cfg("custom.key", "x"), 1, refuse).is_err());
        let allow = UnknownConfigs::Allow;
        assert!(validate_topic_configs(&cfg("custom.key", "x"), 1, allow).is_ok());
        assert!(validate_topic_configs(&cfg("", "x"), 1, allow).is_err());
    }
}
