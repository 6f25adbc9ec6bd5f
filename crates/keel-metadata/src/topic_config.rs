//! The schema of Kafka's topic-level configs (names, types, valid values
//! and defaults, as Kafka's `TopicConfig` documents them for 3.x/4.0), so a
//! value a broker could not parse is refused when it is set, with Kafka's
//! `INVALID_CONFIG` and a message naming the key, instead of being stored.
//! Unknown names are refused too (Kafka's "Unknown topic config name"),
//! unless the controller is told to carry them (`ConfigPolicy`).

use crate::error::{ApiError, ErrorCode};

/// A config's type and what values it takes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ConfigType {
    /// `true` or `false`, any case.
    Boolean,
    /// A 32-bit integer within `[min, max]`.
    Int { min: i64, max: i64 },
    /// A 64-bit integer within `[min, max]`.
    Long { min: i64, max: i64 },
    /// A number within `[min, max]`.
    Double { min: f64, max: f64 },
    /// One of these (exact case).
    Enum(&'static [&'static str]),
    /// A comma-separated, non-empty list of these (exact case).
    EnumList(&'static [&'static str]),
    /// A throttled-replica list: empty, `*`, or `partition:broker` pairs.
    ReplicaList,
    /// Any string.
    String,
}

impl ConfigType {
    /// A comma-separated list (Kafka's `LIST` type: APPEND and SUBTRACT
    /// apply to it).
    pub fn is_list(self) -> bool {
        matches!(self, Self::EnumList(_) | Self::ReplicaList)
    }
}

/// One topic config: its name, type and Kafka's default.
#[derive(Clone, Copy, Debug)]
pub struct TopicConfigDef {
    pub name: &'static str,
    pub ty: ConfigType,
    /// Kafka's default, as Kafka prints it.
    pub default: &'static str,
}

const I32_MAX: i64 = i32::MAX as i64;
const I64_MAX: i64 = i64::MAX;

const fn def(name: &'static str, ty: ConfigType, default: &'static str) -> TopicConfigDef {
    TopicConfigDef { name, ty, default }
}

const fn long(min: i64) -> ConfigType {
    ConfigType::Long { min, max: I64_MAX }
}

const fn int(min: i64) -> ConfigType {
    ConfigType::Int { min, max: I32_MAX }
}

/// Every topic config Kafka defines, by name.
pub static TOPIC_CONFIGS: &[TopicConfigDef] = &[
    def(
        "cleanup.policy",
        ConfigType::EnumList(&["compact", "delete"]),
        "delete",
    ),
    def(
        "compression.gzip.level",
        ConfigType::Int { min: -1, max: 9 },
        "-1",
    ),
    def(
        "compression.lz4.level",
        ConfigType::Int { min: 1, max: 17 },
        "9",
    ),
    def(
        "compression.type",
        ConfigType::Enum(&["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]),
        "producer",
    ),
    def(
        "compression.zstd.level",
        ConfigType::Int {
            min: -131072,
            max: 22,
        },
        "3",
    ),
    def("delete.retention.ms", long(0), "86400000"),
    def("file.delete.delay.ms", long(0), "60000"),
    def("flush.messages", long(1), "9223372036854775807"),
    def("flush.ms", long(0), "9223372036854775807"),
    def(
        "follower.replication.throttled.replicas",
        ConfigType::ReplicaList,
        "",
    ),
    def("index.interval.bytes", int(0), "4096"),
    def(
        "leader.replication.throttled.replicas",
        ConfigType::ReplicaList,
        "",
    ),
    def("local.retention.bytes", long(-2), "-2"),
    def("local.retention.ms", long(-2), "-2"),
    def("max.compaction.lag.ms", long(1), "9223372036854775807"),
    def("max.message.bytes", int(0), "1048588"),
    def("message.downconversion.enable", ConfigType::Boolean, "true"),
    def("message.format.version", ConfigType::String, "3.0-IV1"),
    def(
        "message.timestamp.after.max.ms",
        long(0),
        "9223372036854775807",
    ),
    def(
        "message.timestamp.before.max.ms",
        long(0),
        "9223372036854775807",
    ),
    def(
        "message.timestamp.difference.max.ms",
        long(0),
        "9223372036854775807",
    ),
    def(
        "message.timestamp.type",
        ConfigType::Enum(&["CreateTime", "LogAppendTime"]),
        "CreateTime",
    ),
    def(
        "min.cleanable.dirty.ratio",
        ConfigType::Double { min: 0.0, max: 1.0 },
        "0.5",
    ),
    def("min.compaction.lag.ms", long(0), "0"),
    def(crate::MIN_INSYNC_REPLICAS, int(1), "1"),
    def("preallocate", ConfigType::Boolean, "false"),
    def("remote.log.copy.disable", ConfigType::Boolean, "false"),
    def("remote.log.delete.on.disable", ConfigType::Boolean, "false"),
    def("remote.storage.enable", ConfigType::Boolean, "false"),
    def("retention.bytes", long(-1), "-1"),
    def("retention.ms", long(-1), "604800000"),
    def("segment.bytes", int(14), "1073741824"),
    def("segment.index.bytes", int(4), "10485760"),
    def("segment.jitter.ms", long(0), "0"),
    def("segment.ms", long(1), "604800000"),
    def(crate::UNCLEAN_LEADER_ELECTION, ConfigType::Boolean, "false"),
];

/// The definition of `name`, if Kafka has such a topic config.
pub fn lookup(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Kafka's broker config that gives each topic config its cluster-wide
/// default (Kafka's topic config synonyms): `kafka-configs --entity-type
/// brokers --entity-default` sets these names. Keel stores the default
/// under the topic config's own name.
static BROKER_SYNONYMS: &[(&str, &str)] = &[
    ("cleanup.policy", "log.cleanup.policy"),
    ("compression.gzip.level", "compression.gzip.level"),
    ("compression.lz4.level", "compression.lz4.level"),
    ("compression.type", "compression.type"),
    ("compression.zstd.level", "compression.zstd.level"),
    ("delete.retention.ms", "log.cleaner.delete.retention.ms"),
    ("file.delete.delay.ms", "log.segment.delete.delay.ms"),
    ("flush.messages", "log.flush.interval.messages"),
    ("flush.ms", "log.flush.interval.ms"),
    ("index.interval.bytes", "log.index.interval.bytes"),
    ("local.retention.bytes", "log.local.retention.bytes"),
    ("local.retention.ms", "log.local.retention.ms"),
    ("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms"),
    ("max.message.bytes", "message.max.bytes"),
    (
        "message.downconversion.enable",
        "log.message.downconversion.enable",
    ),
    ("message.format.version", "log.message.format.version"),
    (
        "message.timestamp.after.max.ms",
        "log.message.timestamp.after.max.ms",
    ),
    (
        "message.timestamp.before.max.ms",
        "log.message.timestamp.before.max.ms",
    ),
    (
        "message.timestamp.difference.max.ms",
        "log.message.timestamp.difference.max.ms",
    ),
    ("message.timestamp.type", "log.message.timestamp.type"),
    (
        "min.cleanable.dirty.ratio",
        "log.cleaner.min.cleanable.ratio",
    ),
    ("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms"),
    (crate::MIN_INSYNC_REPLICAS, "min.insync.replicas"),
    ("preallocate", "log.preallocate"),
    ("retention.bytes", "log.retention.bytes"),
    ("retention.ms", "log.retention.ms"),
    ("segment.bytes", "log.segment.bytes"),
    ("segment.index.bytes", "log.index.size.max.bytes"),
    ("segment.jitter.ms", "log.roll.jitter.ms"),
    ("segment.ms", "log.roll.ms"),
    (
        crate::UNCLEAN_LEADER_ELECTION,
        "unclean.leader.election.enable",
    ),
];

/// The broker config name of topic config `key`'s cluster default, if
/// Kafka has one.
pub fn broker_synonym(key: &str) -> Option<&'static str> {
    BROKER_SYNONYMS
        .iter()
        .find(|(t, _)| *t == key)
        .map(|(_, b)| *b)
}

/// The topic config a cluster-default name stands for: a topic config
/// name as it is, or Kafka's broker synonym of one (`log.retention.ms` is
/// `retention.ms`). `None` for any other name.
pub fn default_key(name: &str) -> Option<&'static str> {
    if let Some(d) = lookup(name) {
        return Some(d.name);
    }
    BROKER_SYNONYMS
        .iter()
        .find(|(_, b)| *b == name)
        .map(|(t, _)| *t)
}

/// Where a topic's value of a config comes from (Kafka's config sources).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigSource {
    /// Set on the topic itself (Kafka's `DYNAMIC_TOPIC_CONFIG`).
    Topic,
    /// The cluster-wide default (`--entity-default`; Kafka's
    /// `DYNAMIC_DEFAULT_BROKER_CONFIG`).
    ClusterDefault,
    /// Kafka's built-in default (`DEFAULT_CONFIG`).
    Default,
}

impl ConfigSource {
    /// Kafka's name of the source, as its tools print it.
    pub fn kafka_name(self) -> &'static str {
        match self {
            Self::Topic => "DYNAMIC_TOPIC_CONFIG",
            Self::ClusterDefault => "DYNAMIC_DEFAULT_BROKER_CONFIG",
            Self::Default => "DEFAULT_CONFIG",
        }
    }
}

/// The value a topic has for `key` and where it comes from: `own` (set on
/// the topic), else `default` (the cluster's), else Kafka's default.
/// `None` for a key neither set nor in the schema.
pub fn resolve<'a>(
    key: &str,
    own: Option<&'a str>,
    default: Option<&'a str>,
) -> Option<(&'a str, ConfigSource)> {
    match (own, default) {
        (Some(v), _) => Some((v, ConfigSource::Topic)),
        (None, Some(v)) => Some((v, ConfigSource::ClusterDefault)),
        (None, None) => lookup(key).map(|d| (d.default, ConfigSource::Default)),
    }
}

/// One config as a topic has it.
#[derive(Clone, Copy, Debug)]
pub struct Effective<'a> {
    pub name: &'a str,
    pub value: &'a str,
    pub source: ConfigSource,
    /// Its schema entry (`None` for a key Kafka does not define).
    pub def: Option<&'static TopicConfigDef>,
}

/// Every config of a topic, as `describe` shows them: each one Kafka
/// defines, [`resolve`]d from the topic's `own` values and the cluster's
/// `defaults`, then every other key set on the topic.
pub fn effective<'a>(
    own: &std::collections::BTreeMap<&'a str, &'a str>,
    defaults: &std::collections::BTreeMap<&'a str, &'a str>,
) -> Vec<Effective<'a>> {
    let mut out: Vec<Effective<'a>> = TOPIC_CONFIGS
        .iter()
        .filter_map(|d| {
            let (value, source) = resolve(
                d.name,
                own.get(d.name).copied(),
                defaults.get(d.name).copied(),
            )?;
            Some(Effective {
                name: d.name,
                value,
                source,
                def: Some(d),
            })
        })
        .collect();
    out.extend(
        own.iter()
            .filter(|(k, _)| lookup(k).is_none())
            .map(|(k, v)| Effective {
                name: k,
                value: v,
                source: ConfigSource::Topic,
                def: None,
            }),
    );
    out
}

/// What to do with a config name the schema does not know.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnknownConfigs {
    /// Refuse it with INVALID_CONFIG, as Kafka does.
    #[default]
    Refuse,
    /// Carry it opaquely (`--allow-unknown-topic-configs`: for tests and
    /// benchmarks that need many distinct keys, and for configs of a newer
    /// Kafka than this schema).
    Allow,
}

/// Checks `value` against `def`; the message says what is wrong.
pub fn check_value(def: &TopicConfigDef, value: &str) -> Result<(), String> {
    let v = value.trim();
    let name = def.name;
    let range = |n: i64, min: i64, max: i64, ty: &str| {
        if n < min || n > max {
            Err(format!(
                "Invalid value {value} for configuration {name}: Value must be at least {min}{}",
                if max < I64_MAX && !(ty == "INT" && max == I32_MAX) {
                    format!(" and at most {max}")
                } else {
                    String::new()
                }
            ))
        } else {
            Ok(())
        }
    };
    match def.ty {
        ConfigType::Boolean => {
            if v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false") {
                Ok(())
            } else {
                Err(format!(
                    "Invalid value {value} for configuration {name}: Expected value to be either true or false"
                ))
            }
        }
        ConfigType::Int { min, max } => match v.parse::<i32>() {
            Ok(n) => range(i64::from(n), min, max, "INT"),
            Err(_) => Err(format!(
                "Invalid value {value} for configuration {name}: Not a number of type INT"
            )),
        },
        ConfigType::Long { min, max } => match v.parse::<i64>() {
            Ok(n) => range(n, min, max, "LONG"),
            Err(_) => Err(format!(
                "Invalid value {value} for configuration {name}: Not a number of type LONG"
            )),
        },
        ConfigType::Double { min, max } => match v.parse::<f64>() {
            Ok(n) if n.is_finite() && n >= min && n <= max => Ok(()),
            Ok(_) => Err(format!(
                "Invalid value {value} for configuration {name}: Value must be between {min} and {max}"
            )),
            Err(_) => Err(format!(
                "Invalid value {value} for configuration {name}: Not a number of type DOUBLE"
            )),
        },
        ConfigType::Enum(allowed) => {
            if allowed.contains(&v) {
                Ok(())
            } else {
                Err(format!(
                    "Invalid value {value} for configuration {name}: String must be one of: {}",
                    allowed.join(", ")
                ))
            }
        }
        ConfigType::EnumList(allowed) => {
            let items: Vec<&str> = v.split(',').map(str::trim).collect();
            match items.iter().find(|i| !allowed.contains(i)) {
                None if !v.is_empty() => Ok(()),
                _ => Err(format!(
                    "Invalid value {value} for configuration {name}: a comma-separated list of {}",
                    allowed.join(", ")
                )),
            }
        }
        ConfigType::ReplicaList => {
            if v.is_empty() || v == "*" {
                return Ok(());
            }
            let pair = |p: &str| {
                let (a, b) = p.trim().split_once(':')?;
                a.parse::<u32>().ok()?;
                b.parse::<u32>().ok()
            };
            if v.split(',').all(|p| pair(p).is_some()) {
                Ok(())
            } else {
                Err(format!(
                    "Invalid value {value} for configuration {name}: must be empty, *, or a list of partition:broker pairs"
                ))
            }
        }
        ConfigType::String => Ok(()),
    }
}

/// Checks one `key=value` against the schema: a known key's value, and an
/// unknown key by `unknown`.
pub fn check(key: &str, value: &str, unknown: UnknownConfigs) -> Result<(), ApiError> {
    match lookup(key) {
        Some(def) => {
            check_value(def, value).map_err(|m| ApiError::new(ErrorCode::InvalidConfig, m))
        }
        None if unknown == UnknownConfigs::Allow => Ok(()),
        None => Err(ApiError::new(
            ErrorCode::InvalidConfig,
            format!("Unknown topic config name: {key}"),
        )),
    }
}

/// Checks a key being removed: only its name matters.
pub fn check_name(key: &str, unknown: UnknownConfigs) -> Result<(), ApiError> {
    if lookup(key).is_some() || unknown == UnknownConfigs::Allow {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::InvalidConfig,
            format!("Unknown topic config name: {key}"),
        ))
    }
}

#[cfg(test)]
mod synonym_tests {
    use super::*;

    #[test]
    fn every_synonym_names_a_known_topic_config_and_maps_back() {
        for (topic, broker) in BROKER_SYNONYMS {
            assert!(lookup(topic).is_some(), "{topic}");
            assert_eq!(broker_synonym(topic), Some(*broker));
            assert_eq!(default_key(broker), Some(*topic));
            assert_eq!(default_key(topic), Some(*topic));
        }
        assert_eq!(default_key("log.retention.ms"), Some("retention.ms"));
        assert_eq!(default_key("log.retention.hours"), None);
        assert_eq!(default_key("no.such.config"), None);
        assert_eq!(broker_synonym("remote.storage.enable"), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(k: &str, v: &str) -> String {
        let e = check(k, v, UnknownConfigs::Refuse).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidConfig, "{k}={v}");
        assert!(e.message.contains(k), "{}", e.message);
        e.message
    }

    #[test]
    fn every_default_is_valid_and_names_are_unique() {
        let mut names: Vec<&str> = TOPIC_CONFIGS.iter().map(|d| d.name).collect();
        for d in TOPIC_CONFIGS {
            check_value(d, d.default).unwrap_or_else(|e| panic!("{}: {e}", d.name));
        }
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
    }

    #[test]
    fn values_are_checked_by_type_and_range() {
        for (k, v) in [
            ("retention.ms", "-1"),
            ("retention.ms", "86400000"),
            ("cleanup.policy", "compact,delete"),
            ("cleanup.policy", "compact"),
            ("compression.type", "zstd"),
            ("min.cleanable.dirty.ratio", "0.25"),
            ("unclean.leader.election.enable", "TRUE"),
            ("leader.replication.throttled.replicas", "0:1,1:2"),
            ("leader.replication.throttled.replicas", "*"),
            ("message.timestamp.type", "LogAppendTime"),
            ("segment.bytes", "14"),
        ] {
            check(k, v, UnknownConfigs::Refuse).unwrap_or_else(|e| panic!("{k}={v}: {e:?}"));
        }
        assert!(refused("retention.ms", "abc").contains("Not a number of type LONG"));
        assert!(refused("retention.ms", "-5").contains("at least -1"));
        assert!(refused("segment.bytes", "3000000000").contains("INT"));
        assert!(refused("segment.bytes", "13").contains("at least 14"));
        assert!(refused("cleanup.policy", "forever").contains("compact, delete"));
        refused("cleanup.policy", "");
        refused("compression.type", "ZSTD");
        refused("min.cleanable.dirty.ratio", "1.5");
        refused("min.cleanable.dirty.ratio", "NaN");
        refused("preallocate", "yes");
        refused("compression.gzip.level", "10");
        refused("follower.replication.throttled.replicas", "0-1");
    }

    #[test]
    fn unknown_names_are_refused_unless_allowed() {
        assert!(refused("retention.msec", "1").contains("Unknown topic config name"));
        check("bench.k1", "x", UnknownConfigs::Allow).unwrap();
        check_name("retention.msec", UnknownConfigs::Refuse).unwrap_err();
        check_name("retention.ms", UnknownConfigs::Refuse).unwrap();
        check_name("bench.k1", UnknownConfigs::Allow).unwrap();
        // Known keys stay checked when unknown ones are allowed.
        check("retention.ms", "abc", UnknownConfigs::Allow).unwrap_err();
    }
}
