//! The authorization decision against a reference model written
//! differently (explicit tables instead of the implementation's rules), on
//! random ACL sets, principals, operations and resources.

use std::collections::BTreeSet;

use keel_metadata::acl::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, RngSeed};

/// (granted by an ALLOW, asked): every pair an ALLOW binding permits.
fn allow_table() -> BTreeSet<(Operation, Operation)> {
    use Operation::*;
    let mut t = BTreeSet::new();
    for op in Operation::ALL {
        t.insert((op, op));
        t.insert((All, op));
    }
    for granted in [Create, Delete, Alter] {
        t.insert((granted, Describe));
    }
    t.insert((AlterConfigs, DescribeConfigs));
    t
}

/// The users, brokers and controllers the model knows.
fn principals() -> Vec<Principal> {
    vec![
        Principal::User("alice".into()),
        Principal::User("bob".into()),
        Principal::User("*".into()),
        Principal::Anonymous,
        Principal::Broker(1),
        Principal::Controller(1),
    ]
}

fn patterns() -> Vec<ResourcePattern> {
    vec![
        ResourcePattern::Topic("orders".into()),
        ResourcePattern::Topic("ord".into()),
        ResourcePattern::TopicPrefix("ord".into()),
        ResourcePattern::TopicPrefix("pay".into()),
        ResourcePattern::Cluster,
    ]
}

fn binding() -> impl Strategy<Value = AclBinding> {
    (
        0..principals().len(),
        0..patterns().len(),
        0..Operation::ALL.len(),
        any::<bool>(),
    )
        .prop_map(|(p, r, o, allow)| AclBinding {
            principal: principals()[p].clone(),
            pattern: patterns()[r].clone(),
            operation: Operation::ALL[o],
            permission: if allow {
                Permission::Allow
            } else {
                Permission::Deny
            },
        })
}

/// The model: the resources a pattern names, spelled out.
fn names(pattern: &ResourcePattern, resource: &str) -> bool {
    match pattern {
        ResourcePattern::Cluster => resource == "<cluster>",
        ResourcePattern::Topic(t) => resource == t.as_str(),
        ResourcePattern::TopicPrefix(p) => {
            resource != "<cluster>" && resource.len() >= p.len() && &resource[..p.len()] == p
        }
    }
}

fn model(
    acls: &[AclBinding],
    supers: &BTreeSet<Principal>,
    who: &Principal,
    op: Operation,
    resource: &str,
) -> bool {
    if supers.contains(who) {
        return true;
    }
    let is_user = matches!(who, Principal::User(_) | Principal::Anonymous);
    let me = |b: &AclBinding| {
        b.principal == *who || (b.principal == Principal::User("*".into()) && is_user)
    };
    let denied = acls.iter().any(|b| {
        b.permission == Permission::Deny
            && me(b)
            && names(&b.pattern, resource)
            && (b.operation == op || b.operation == Operation::All)
    });
    if denied {
        return false;
    }
    let table = allow_table();
    acls.iter().any(|b| {
        b.permission == Permission::Allow
            && me(b)
            && names(&b.pattern, resource)
            && table.contains(&(b.operation, op))
    })
}

proptest! {
    #![proptest_config(Config {
        cases: 2_000,
        rng_algorithm: RngAlgorithm::ChaCha,
        rng_seed: RngSeed::Fixed(0xac15eed),
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn the_decision_agrees_with_the_reference_model(
        acls in prop::collection::vec(binding(), 0..12),
        supers in prop::collection::btree_set(0..6usize, 0..2),
        who in 0..6usize,
        op in 0..Operation::ALL.len(),
        resource in prop::sample::select(vec!["orders", "ord", "payments", "ordx", "other", "<cluster>"]),
    ) {
        let ps = principals();
        let supers: BTreeSet<Principal> = supers.into_iter().map(|i| ps[i].clone()).collect();
        let who = &ps[who];
        let op = Operation::ALL[op];
        let r = if resource == "<cluster>" {
            Resource::Cluster
        } else {
            Resource::Topic(resource)
        };
        let got = authorize(&acls, &supers, who, op, r);
        let want = model(&acls, &supers, who, op, resource);
        prop_assert_eq!(got.allowed(), want, "{:?} {} {} on {}", acls, who, op, resource);
        // A denial names the DENY binding that caused it, when one did.
        if let Verdict::Denied(Some(b)) = got {
            prop_assert_eq!(b.permission, Permission::Deny);
            prop_assert!(acls.contains(&b));
        }
    }
}
