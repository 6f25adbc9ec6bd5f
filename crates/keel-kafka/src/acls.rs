//! Kafka's ACL and SCRAM credential fields as Keel's: pure functions, no
//! I/O. `admin` sends what these produce to the active controller.
//!
//! Keel's ACLs are narrower than Kafka's: resources are a topic, a topic
//! prefix or the cluster; there is no data path (no READ or WRITE) and no
//! host filtering. A Kafka binding Keel cannot hold is refused per item
//! with INVALID_REQUEST and a message naming what is missing. A Kafka
//! filter Keel's [`AclFilter`] cannot express exactly (MATCH, a wildcard
//! name) is sent broader and narrowed here with [`KafkaFilter::matches`].

use std::collections::BTreeMap;

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_acls_response::DeleteAclsMatchingAcl;
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::DescribeAclsRequest;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use keel_metadata::acl::{AclBinding, Operation, Permission, Principal, ResourcePattern};
use keel_metadata::decide::AclFilter;

use crate::error::KafkaError;

/// Kafka's resource types (`ResourceType.code`).
pub const RESOURCE_ANY: i8 = 1;
pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_GROUP: i8 = 3;
pub const RESOURCE_CLUSTER: i8 = 4;
pub const RESOURCE_TRANSACTIONAL_ID: i8 = 5;
pub const RESOURCE_DELEGATION_TOKEN: i8 = 6;
pub const RESOURCE_USER: i8 = 7;

/// Kafka's pattern types (`PatternType.code`).
pub const PATTERN_ANY: i8 = 1;
pub const PATTERN_MATCH: i8 = 2;
pub const PATTERN_LITERAL: i8 = 3;
pub const PATTERN_PREFIXED: i8 = 4;

/// Kafka's operations (`AclOperation.code`).
pub const OP_ANY: i8 = 1;
pub const OP_ALL: i8 = 2;
pub const OP_READ: i8 = 3;
pub const OP_WRITE: i8 = 4;
pub const OP_CREATE: i8 = 5;
pub const OP_DELETE: i8 = 6;
pub const OP_ALTER: i8 = 7;
pub const OP_DESCRIBE: i8 = 8;
pub const OP_CLUSTER_ACTION: i8 = 9;
pub const OP_DESCRIBE_CONFIGS: i8 = 10;
pub const OP_ALTER_CONFIGS: i8 = 11;
pub const OP_IDEMPOTENT_WRITE: i8 = 12;
pub const OP_CREATE_TOKENS: i8 = 13;
pub const OP_DESCRIBE_TOKENS: i8 = 14;

/// Kafka's permission types (`AclPermissionType.code`).
pub const PERMISSION_ANY: i8 = 1;
pub const PERMISSION_DENY: i8 = 2;
pub const PERMISSION_ALLOW: i8 = 3;

/// The only cluster resource name Kafka knows.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// The only host Keel's bindings have: Keel does not filter by host.
pub const ANY_HOST: &str = "*";

fn invalid(message: impl Into<String>) -> KafkaError {
    KafkaError {
        code: ResponseError::InvalidRequest.code(),
        message: Some(message.into()),
    }
}

/// Kafka's name of a resource type, for messages.
fn resource_type_name(t: i8) -> String {
    match t {
        RESOURCE_ANY => "ANY".into(),
        RESOURCE_TOPIC => "TOPIC".into(),
        RESOURCE_GROUP => "GROUP".into(),
        RESOURCE_CLUSTER => "CLUSTER".into(),
        RESOURCE_TRANSACTIONAL_ID => "TRANSACTIONAL_ID".into(),
        RESOURCE_DELEGATION_TOKEN => "DELEGATION_TOKEN".into(),
        RESOURCE_USER => "USER".into(),
        other => format!("UNKNOWN ({other})"),
    }
}

/// Kafka's name of an operation Keel has no counterpart of.
fn operation_name(op: i8) -> String {
    match op {
        OP_ANY => "ANY".into(),
        OP_READ => "READ".into(),
        OP_WRITE => "WRITE".into(),
        OP_IDEMPOTENT_WRITE => "IDEMPOTENT_WRITE".into(),
        OP_CREATE_TOKENS => "CREATE_TOKENS".into(),
        OP_DESCRIBE_TOKENS => "DESCRIBE_TOKENS".into(),
        other => format!("UNKNOWN ({other})"),
    }
}

/// Keel's operation for a Kafka operation code (`None`: Keel has none).
pub fn operation_of(op: i8) -> Option<Operation> {
    Some(match op {
        OP_ALL => Operation::All,
        OP_CREATE => Operation::Create,
        OP_DELETE => Operation::Delete,
        OP_ALTER => Operation::Alter,
        OP_DESCRIBE => Operation::Describe,
        OP_CLUSTER_ACTION => Operation::ClusterAction,
        OP_DESCRIBE_CONFIGS => Operation::DescribeConfigs,
        OP_ALTER_CONFIGS => Operation::AlterConfigs,
        _ => return None,
    })
}

/// Kafka's code of a Keel operation.
pub fn operation_code(op: Operation) -> i8 {
    match op {
        Operation::All => OP_ALL,
        Operation::Create => OP_CREATE,
        Operation::Delete => OP_DELETE,
        Operation::Alter => OP_ALTER,
        Operation::Describe => OP_DESCRIBE,
        Operation::ClusterAction => OP_CLUSTER_ACTION,
        Operation::DescribeConfigs => OP_DESCRIBE_CONFIGS,
        Operation::AlterConfigs => OP_ALTER_CONFIGS,
    }
}

/// Keel's permission for a Kafka permission code (`None`: ANY or unknown).
pub fn permission_of(p: i8) -> Option<Permission> {
    match p {
        PERMISSION_ALLOW => Some(Permission::Allow),
        PERMISSION_DENY => Some(Permission::Deny),
        _ => None,
    }
}

pub fn permission_code(p: Permission) -> i8 {
    match p {
        Permission::Allow => PERMISSION_ALLOW,
        Permission::Deny => PERMISSION_DENY,
    }
}

/// A Keel binding's resource as Kafka names it: (type, name, pattern type).
pub fn resource_of(p: &ResourcePattern) -> (i8, &str, i8) {
    match p {
        ResourcePattern::Topic(t) => (RESOURCE_TOPIC, t.as_str(), PATTERN_LITERAL),
        ResourcePattern::TopicPrefix(t) => (RESOURCE_TOPIC, t.as_str(), PATTERN_PREFIXED),
        ResourcePattern::Cluster => (RESOURCE_CLUSTER, CLUSTER_NAME, PATTERN_LITERAL),
    }
}

/// The Keel resource pattern of a Kafka resource (type, name, pattern type)
/// in a binding to create.
fn pattern_of(
    resource_type: i8,
    name: &str,
    pattern_type: i8,
) -> Result<ResourcePattern, KafkaError> {
    match (resource_type, pattern_type) {
        (RESOURCE_TOPIC, PATTERN_LITERAL) if name == "*" => Err(invalid(
            "Keel has no wildcard topic binding; use --topic-prefix",
        )),
        (RESOURCE_TOPIC, PATTERN_LITERAL) => Ok(ResourcePattern::Topic(name.to_string())),
        (RESOURCE_TOPIC, PATTERN_PREFIXED) => Ok(ResourcePattern::TopicPrefix(name.to_string())),
        (RESOURCE_CLUSTER, PATTERN_LITERAL) if name == CLUSTER_NAME => Ok(ResourcePattern::Cluster),
        (RESOURCE_CLUSTER, PATTERN_LITERAL) => Err(invalid(format!(
            "the cluster resource is named {CLUSTER_NAME}, not {name:?}"
        ))),
        (RESOURCE_TOPIC | RESOURCE_CLUSTER, p) => Err(invalid(format!(
            "pattern type {p} is not one a binding may have on {} (LITERAL 3{})",
            resource_type_name(resource_type),
            if resource_type == RESOURCE_TOPIC {
                " or PREFIXED 4"
            } else {
                ""
            }
        ))),
        (t, _) => Err(invalid(format!(
            "Keel has no ACLs on {} resources (only TOPIC and CLUSTER)",
            resource_type_name(t)
        ))),
    }
}

/// The Keel binding a Kafka ACL creation asks for, or why Keel cannot hold
/// it (INVALID_REQUEST, per item).
pub fn binding_of(c: &AclCreation) -> Result<AclBinding, KafkaError> {
    let pattern = pattern_of(c.resource_type, &c.resource_name, c.resource_pattern_type)?;
    let principal: Principal = c
        .principal
        .parse()
        .map_err(|e: keel_metadata::acl::BadPrincipal| invalid(e.to_string()))?;
    if c.host.as_str() != ANY_HOST {
        return Err(invalid(format!(
            "Keel's ACLs do not filter by host: the host must be *, not {:?}",
            c.host.as_str()
        )));
    }
    let operation = match c.operation {
        OP_READ | OP_WRITE | OP_IDEMPOTENT_WRITE => {
            return Err(invalid(format!(
                "Keel has no data path: {} is not an operation of Keel's ACLs",
                operation_name(c.operation)
            )))
        }
        op => operation_of(op).ok_or_else(|| {
            invalid(format!(
                "operation {} is not one a binding may have",
                operation_name(op)
            ))
        })?,
    };
    let permission = permission_of(c.permission_type).ok_or_else(|| {
        invalid(format!(
            "permission type {} is not ALLOW (3) or DENY (2)",
            c.permission_type
        ))
    })?;
    Ok(AclBinding {
        principal,
        pattern,
        operation,
        permission,
    })
}

/// A Kafka ACL filter (DescribeAcls' fields, or one of DeleteAcls'
/// filters): null strings and the ANY codes match everything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaFilter {
    pub resource_type: i8,
    /// `None`: any name.
    pub name: Option<String>,
    pub pattern_type: i8,
    /// `None`: any principal.
    pub principal: Option<String>,
    /// `None`: any host.
    pub host: Option<String>,
    pub operation: i8,
    pub permission: i8,
}

fn string(s: &Option<StrBytes>) -> Option<String> {
    s.as_ref().map(|s| s.to_string())
}

impl KafkaFilter {
    pub fn of_describe(r: &DescribeAclsRequest) -> Self {
        Self {
            resource_type: r.resource_type_filter,
            name: string(&r.resource_name_filter),
            pattern_type: r.pattern_type_filter,
            principal: string(&r.principal_filter),
            host: string(&r.host_filter),
            operation: r.operation,
            permission: r.permission_type,
        }
    }

    pub fn of_delete(f: &DeleteAclsFilter) -> Self {
        Self {
            resource_type: f.resource_type_filter,
            name: string(&f.resource_name_filter),
            pattern_type: f.pattern_type_filter,
            principal: string(&f.principal_filter),
            host: string(&f.host_filter),
            operation: f.operation,
            permission: f.permission_type,
        }
    }

    /// Kafka refuses a filter with an UNKNOWN (or out of range) code.
    pub fn validate(&self) -> Result<(), KafkaError> {
        let bad = |what: &str, v: i8| invalid(format!("the filter's {what} {v} is unknown"));
        if !(RESOURCE_ANY..=RESOURCE_USER).contains(&self.resource_type) {
            return Err(bad("resource type", self.resource_type));
        }
        if !(PATTERN_ANY..=PATTERN_PREFIXED).contains(&self.pattern_type) {
            return Err(bad("pattern type", self.pattern_type));
        }
        if !(OP_ANY..=OP_DESCRIBE_TOKENS).contains(&self.operation) {
            return Err(bad("operation", self.operation));
        }
        if !(PERMISSION_ANY..=PERMISSION_ALLOW).contains(&self.permission) {
            return Err(bad("permission type", self.permission));
        }
        Ok(())
    }

    /// Keel's filter to fetch with: it selects every binding this filter
    /// matches (and perhaps more: narrow with [`Self::matches`]). `None`:
    /// no binding Keel can hold matches (a GROUP resource, a READ
    /// operation, a host other than `*`, a principal Keel cannot name).
    pub fn keel_filter(&self) -> Option<AclFilter> {
        if matches!(
            self.resource_type,
            RESOURCE_GROUP | RESOURCE_TRANSACTIONAL_ID | RESOURCE_DELEGATION_TOKEN | RESOURCE_USER
        ) {
            return None;
        }
        if self.host.as_deref().is_some_and(|h| h != ANY_HOST) {
            return None;
        }
        let principal = match &self.principal {
            None => None,
            Some(p) => Some(p.parse::<Principal>().ok()?),
        };
        let operation = match self.operation {
            OP_ANY => None,
            op => Some(operation_of(op)?),
        };
        let permission = match self.permission {
            PERMISSION_ANY => None,
            p => Some(permission_of(p)?),
        };
        let pattern = match (self.resource_type, self.pattern_type, &self.name) {
            // The cluster is one pattern whatever the filter's pattern type.
            (RESOURCE_CLUSTER, ..) => Some(ResourcePattern::Cluster),
            (RESOURCE_TOPIC, PATTERN_LITERAL, Some(n)) => Some(ResourcePattern::Topic(n.clone())),
            (RESOURCE_TOPIC, PATTERN_PREFIXED, Some(n)) => {
                Some(ResourcePattern::TopicPrefix(n.clone()))
            }
            _ => None,
        };
        Some(AclFilter {
            principal,
            pattern,
            operation,
            permission,
        })
    }

    /// Whether this filter matches `b`, as Kafka's `AclBindingFilter`
    /// matches (MATCH: the literal name, the literal `*`, or a prefix of
    /// the name).
    pub fn matches(&self, b: &AclBinding) -> bool {
        let (resource_type, name, pattern_type) = resource_of(&b.pattern);
        let resource = (self.resource_type == RESOURCE_ANY || self.resource_type == resource_type)
            && match self.pattern_type {
                PATTERN_ANY => self.name.as_deref().is_none_or(|n| n == name),
                PATTERN_MATCH => self.name.as_deref().is_none_or(|n| match pattern_type {
                    PATTERN_PREFIXED => n.starts_with(name),
                    _ => n == name || name == "*",
                }),
                t => t == pattern_type && self.name.as_deref().is_none_or(|n| n == name),
            };
        resource
            && self
                .principal
                .as_deref()
                .is_none_or(|p| p == b.principal.to_string())
            && self.host.as_deref().is_none_or(|h| h == ANY_HOST)
            && (self.operation == OP_ANY || self.operation == operation_code(b.operation))
            && (self.permission == PERMISSION_ANY
                || self.permission == permission_code(b.permission))
    }
}

/// A Keel filter selecting exactly `b`: what a DeleteAcls sends, so only
/// the bindings the Kafka filter matched are removed.
pub fn exact_filter(b: &AclBinding) -> AclFilter {
    AclFilter {
        principal: Some(b.principal.clone()),
        pattern: Some(b.pattern.clone()),
        operation: Some(b.operation),
        permission: Some(b.permission),
    }
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// DescribeAcls' answer shape: bindings grouped by resource (in resource
/// order), each group's ACLs in order.
pub fn describe_resources<'a>(
    bindings: impl IntoIterator<Item = &'a AclBinding>,
) -> Vec<DescribeAclsResource> {
    let mut by_resource: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
    for b in bindings {
        let (t, n, p) = resource_of(&b.pattern);
        by_resource.entry((t, n.to_string(), p)).or_default().push(
            AclDescription::default()
                .with_principal(s(&b.principal.to_string()))
                .with_host(s(ANY_HOST))
                .with_operation(operation_code(b.operation))
                .with_permission_type(permission_code(b.permission)),
        );
    }
    by_resource
        .into_iter()
        .map(|((t, n, p), acls)| {
            DescribeAclsResource::default()
                .with_resource_type(t)
                .with_resource_name(s(&n))
                .with_pattern_type(p)
                .with_acls(acls)
        })
        .collect()
}

/// One removed binding as DeleteAcls names it.
pub fn matching_acl(b: &AclBinding) -> DeleteAclsMatchingAcl {
    let (t, n, p) = resource_of(&b.pattern);
    DeleteAclsMatchingAcl::default()
        .with_resource_type(t)
        .with_resource_name(s(n))
        .with_pattern_type(p)
        .with_principal(s(&b.principal.to_string()))
        .with_host(s(ANY_HOST))
        .with_operation(operation_code(b.operation))
        .with_permission_type(permission_code(b.permission))
}

/// Per-item results collapsed per user, as Kafka answers
/// AlterUserScramCredentials: one result per user (in order of first
/// mention), its first error, or success when all its items succeeded.
pub fn per_user(
    items: impl IntoIterator<Item = (String, KafkaError)>,
) -> Vec<(String, KafkaError)> {
    let mut out: Vec<(String, KafkaError)> = Vec::new();
    for (user, e) in items {
        match out.iter_mut().find(|(u, _)| *u == user) {
            Some((_, first)) => {
                if first.code == 0 {
                    *first = e;
                }
            }
            None => out.push((user, e)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creation(t: i8, name: &str, p: i8) -> AclCreation {
        AclCreation::default()
            .with_resource_type(t)
            .with_resource_name(s(name))
            .with_resource_pattern_type(p)
            .with_principal(s("User:alice"))
            .with_host(s("*"))
            .with_operation(OP_CREATE)
            .with_permission_type(PERMISSION_ALLOW)
    }

    fn binding(pattern: ResourcePattern, op: Operation, perm: Permission) -> AclBinding {
        AclBinding {
            principal: Principal::User("alice".into()),
            pattern,
            operation: op,
            permission: perm,
        }
    }

    fn refused(c: &AclCreation) -> String {
        let e = binding_of(c).unwrap_err();
        assert_eq!(e.code, ResponseError::InvalidRequest.code());
        e.message.unwrap()
    }

    #[test]
    fn topic_literal_prefixed_and_the_cluster_map_to_keel_patterns() {
        let b = binding_of(&creation(RESOURCE_TOPIC, "orders", PATTERN_LITERAL)).unwrap();
        assert_eq!(
            b,
            binding(
                ResourcePattern::Topic("orders".into()),
                Operation::Create,
                Permission::Allow
            )
        );
        let b = binding_of(&creation(RESOURCE_TOPIC, "ord", PATTERN_PREFIXED)).unwrap();
        assert_eq!(b.pattern, ResourcePattern::TopicPrefix("ord".into()));
        let b = binding_of(&creation(RESOURCE_CLUSTER, CLUSTER_NAME, PATTERN_LITERAL)).unwrap();
        assert_eq!(b.pattern, ResourcePattern::Cluster);
    }

    #[test]
    fn resources_keel_cannot_hold_are_refused_with_invalid_request() {
        let m = refused(&creation(RESOURCE_TOPIC, "*", PATTERN_LITERAL));
        assert!(m.contains("--topic-prefix"), "{m}");
        for (t, name) in [
            (RESOURCE_GROUP, "GROUP"),
            (RESOURCE_TRANSACTIONAL_ID, "TRANSACTIONAL_ID"),
            (RESOURCE_DELEGATION_TOKEN, "DELEGATION_TOKEN"),
            (RESOURCE_USER, "USER"),
            (RESOURCE_ANY, "ANY"),
            (0, "UNKNOWN"),
        ] {
            let m = refused(&creation(t, "x", PATTERN_LITERAL));
            assert!(m.contains(name), "{m}");
        }
        assert!(
            refused(&creation(RESOURCE_CLUSTER, "other", PATTERN_LITERAL)).contains(CLUSTER_NAME)
        );
        refused(&creation(RESOURCE_CLUSTER, CLUSTER_NAME, PATTERN_PREFIXED));
        refused(&creation(RESOURCE_TOPIC, "orders", PATTERN_MATCH));
        refused(&creation(RESOURCE_TOPIC, "orders", PATTERN_ANY));
    }

    #[test]
    fn operations_map_one_to_one_and_data_operations_are_refused() {
        for (code, op) in [
            (OP_ALL, Operation::All),
            (OP_CREATE, Operation::Create),
            (OP_DELETE, Operation::Delete),
            (OP_ALTER, Operation::Alter),
            (OP_DESCRIBE, Operation::Describe),
            (OP_CLUSTER_ACTION, Operation::ClusterAction),
            (OP_DESCRIBE_CONFIGS, Operation::DescribeConfigs),
            (OP_ALTER_CONFIGS, Operation::AlterConfigs),
        ] {
            let c = creation(RESOURCE_CLUSTER, CLUSTER_NAME, PATTERN_LITERAL).with_operation(code);
            assert_eq!(binding_of(&c).unwrap().operation, op);
            assert_eq!(operation_code(op), code);
        }
        for code in [OP_READ, OP_WRITE, OP_IDEMPOTENT_WRITE] {
            let m = refused(&creation(RESOURCE_TOPIC, "t", PATTERN_LITERAL).with_operation(code));
            assert!(m.contains("no data path"), "{m}");
        }
        for code in [0, OP_ANY, OP_CREATE_TOKENS, OP_DESCRIBE_TOKENS, 42] {
            refused(&creation(RESOURCE_TOPIC, "t", PATTERN_LITERAL).with_operation(code));
        }
    }

    #[test]
    fn permission_host_and_principal_are_checked() {
        let c = creation(RESOURCE_TOPIC, "t", PATTERN_LITERAL);
        let deny = c.clone().with_permission_type(PERMISSION_DENY);
        assert_eq!(binding_of(&deny).unwrap().permission, Permission::Deny);
        for p in [0, PERMISSION_ANY, 9] {
            refused(&c.clone().with_permission_type(p));
        }
        let m = refused(&c.clone().with_host(s("10.0.0.1")));
        assert!(m.contains("host"), "{m}");
        refused(&c.clone().with_principal(s("alice")));
        refused(&c.clone().with_principal(s("Group:x")));
        let any = binding_of(&c.clone().with_principal(s("User:*"))).unwrap();
        assert_eq!(any.principal, Principal::any_user());
        let broker = binding_of(&c.with_principal(s("Broker:3"))).unwrap();
        assert_eq!(broker.principal, Principal::Broker(3));
    }

    fn filter() -> KafkaFilter {
        KafkaFilter {
            resource_type: RESOURCE_ANY,
            name: None,
            pattern_type: PATTERN_ANY,
            principal: None,
            host: None,
            operation: OP_ANY,
            permission: PERMISSION_ANY,
        }
    }

    #[test]
    fn an_all_wildcard_filter_fetches_everything_and_matches_everything() {
        let f = filter();
        assert!(f.validate().is_ok());
        assert_eq!(f.keel_filter(), Some(AclFilter::default()));
        for p in [
            ResourcePattern::Topic("a".into()),
            ResourcePattern::TopicPrefix("a".into()),
            ResourcePattern::Cluster,
        ] {
            assert!(f.matches(&binding(p, Operation::Alter, Permission::Deny)));
        }
    }

    #[test]
    fn filters_with_unknown_codes_are_refused() {
        for f in [
            KafkaFilter {
                resource_type: 0,
                ..filter()
            },
            KafkaFilter {
                pattern_type: 0,
                ..filter()
            },
            KafkaFilter {
                operation: 0,
                ..filter()
            },
            KafkaFilter {
                permission: 0,
                ..filter()
            },
            KafkaFilter {
                operation: 15,
                ..filter()
            },
        ] {
            assert_eq!(
                f.validate().unwrap_err().code,
                ResponseError::InvalidRequest.code()
            );
        }
    }

    #[test]
    fn exact_filters_are_sent_exactly_and_others_broader() {
        let f = KafkaFilter {
            resource_type: RESOURCE_TOPIC,
            name: Some("orders".into()),
            pattern_type: PATTERN_LITERAL,
            principal: Some("User:alice".into()),
            host: Some("*".into()),
            operation: OP_DESCRIBE,
            permission: PERMISSION_ALLOW,
        };
        let b = binding(
            ResourcePattern::Topic("orders".into()),
            Operation::Describe,
            Permission::Allow,
        );
        assert_eq!(f.keel_filter(), Some(exact_filter(&b)));
        assert!(f.matches(&b));
        let prefixed = KafkaFilter {
            pattern_type: PATTERN_PREFIXED,
            ..f.clone()
        };
        assert_eq!(
            prefixed.keel_filter().unwrap().pattern,
            Some(ResourcePattern::TopicPrefix("orders".into()))
        );
        assert!(!prefixed.matches(&b));
        // MATCH cannot be expressed: fetched without a pattern.
        let matching = KafkaFilter {
            pattern_type: PATTERN_MATCH,
            ..f.clone()
        };
        assert_eq!(matching.keel_filter().unwrap().pattern, None);
        let cluster = KafkaFilter {
            resource_type: RESOURCE_CLUSTER,
            name: None,
            ..f
        };
        assert_eq!(
            cluster.keel_filter().unwrap().pattern,
            Some(ResourcePattern::Cluster)
        );
    }

    #[test]
    fn a_match_filter_matches_the_literal_name_and_every_covering_prefix() {
        let f = KafkaFilter {
            resource_type: RESOURCE_TOPIC,
            name: Some("orders-eu".into()),
            pattern_type: PATTERN_MATCH,
            ..filter()
        };
        let b = |p| binding(p, Operation::All, Permission::Allow);
        assert!(f.matches(&b(ResourcePattern::Topic("orders-eu".into()))));
        assert!(f.matches(&b(ResourcePattern::TopicPrefix("orders".into()))));
        assert!(!f.matches(&b(ResourcePattern::TopicPrefix("payments".into()))));
        assert!(!f.matches(&b(ResourcePattern::Topic("orders".into()))));
        assert!(!f.matches(&b(ResourcePattern::Cluster)));
        // ANY with a name: that name, whatever its pattern type.
        let any = KafkaFilter {
            pattern_type: PATTERN_ANY,
            name: Some("orders".into()),
            ..f
        };
        assert!(any.matches(&b(ResourcePattern::TopicPrefix("orders".into()))));
        assert!(any.matches(&b(ResourcePattern::Topic("orders".into()))));
        assert!(!any.matches(&b(ResourcePattern::Topic("orders-eu".into()))));
    }

    #[test]
    fn filters_no_keel_binding_can_match_fetch_nothing() {
        for f in [
            KafkaFilter {
                resource_type: RESOURCE_GROUP,
                ..filter()
            },
            KafkaFilter {
                operation: OP_READ,
                ..filter()
            },
            KafkaFilter {
                host: Some("10.0.0.1".into()),
                ..filter()
            },
            KafkaFilter {
                principal: Some("nobody".into()),
                ..filter()
            },
        ] {
            assert_eq!(f.keel_filter(), None, "{f:?}");
            assert!(!f.matches(&binding(
                ResourcePattern::Topic("t".into()),
                Operation::All,
                Permission::Allow
            )));
        }
    }

    #[test]
    fn descriptions_are_grouped_by_resource() {
        let a = binding(
            ResourcePattern::TopicPrefix("ord".into()),
            Operation::Create,
            Permission::Allow,
        );
        let c = binding(ResourcePattern::Cluster, Operation::Alter, Permission::Deny);
        let d = binding(
            ResourcePattern::TopicPrefix("ord".into()),
            Operation::Delete,
            Permission::Deny,
        );
        let r = describe_resources([&a, &c, &d]);
        assert_eq!(r.len(), 2);
        assert_eq!(
            (
                r[0].resource_type,
                r[0].resource_name.as_str(),
                r[0].pattern_type
            ),
            (RESOURCE_TOPIC, "ord", PATTERN_PREFIXED)
        );
        let ops: Vec<(i8, i8)> = r[0]
            .acls
            .iter()
            .map(|a| (a.operation, a.permission_type))
            .collect();
        assert_eq!(
            ops,
            [(OP_CREATE, PERMISSION_ALLOW), (OP_DELETE, PERMISSION_DENY)]
        );
        assert_eq!(r[0].acls[0].principal.as_str(), "User:alice");
        assert_eq!(r[0].acls[0].host.as_str(), "*");
        assert_eq!(
            (
                r[1].resource_type,
                r[1].resource_name.as_str(),
                r[1].pattern_type
            ),
            (RESOURCE_CLUSTER, CLUSTER_NAME, PATTERN_LITERAL)
        );
        let m = matching_acl(&c);
        assert_eq!(
            (m.resource_type, m.operation, m.permission_type),
            (RESOURCE_CLUSTER, OP_ALTER, PERMISSION_DENY)
        );
    }

    #[test]
    fn per_user_results_keep_the_first_error() {
        let ok = KafkaError {
            code: 0,
            message: None,
        };
        let e = |code: ResponseError| KafkaError {
            code: code.code(),
            message: Some("x".into()),
        };
        let r = per_user([
            ("bob".to_string(), ok.clone()),
            (
                "alice".to_string(),
                e(ResponseError::UnacceptableCredential),
            ),
            ("bob".to_string(), e(ResponseError::ResourceNotFound)),
            ("bob".to_string(), e(ResponseError::DuplicateResource)),
            ("alice".to_string(), ok.clone()),
        ]);
        let codes: Vec<(&str, i16)> = r.iter().map(|(u, e)| (u.as_str(), e.code)).collect();
        assert_eq!(
            codes,
            [
                ("bob", ResponseError::ResourceNotFound.code()),
                ("alice", ResponseError::UnacceptableCredential.code())
            ]
        );
    }
}
