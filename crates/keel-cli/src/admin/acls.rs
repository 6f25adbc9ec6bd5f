//! `keel acls`: add, remove and list ACL bindings.

use std::process::ExitCode;

use clap::{ArgGroup, Args, Subcommand};
use keel_metadata::acl::{AclBinding, Operation, Permission, Principal, ResourcePattern};
use keel_metadata::decide::AclFilter;
use keel_proto::client::ControllerClient;
use keel_proto::convert::{acl_binding_from_pb, acl_binding_to_pb, acl_filter_to_pb};
use keel_proto::pb;
use serde_json::json;

use super::{item_error, usage, Common};
use crate::output::{self, Output};

#[derive(Args, Debug)]
pub struct AclsArgs {
    #[command(subcommand)]
    cmd: AclsCmd,
    #[command(flatten)]
    common: Common,
}

/// The resource of a binding: exactly one of these.
#[derive(Args, Debug, Clone)]
#[command(group(ArgGroup::new("resource").args(["topic", "topic_prefix", "cluster"])))]
struct ResourceArgs {
    /// The topic of exactly this name.
    #[arg(long)]
    topic: Option<String>,
    /// Every topic whose name starts with this prefix.
    #[arg(long)]
    topic_prefix: Option<String>,
    /// The cluster (brokers, quorum, reassignments, elections, ACLs).
    #[arg(long)]
    cluster: bool,
}

impl ResourceArgs {
    fn pattern(&self) -> Option<ResourcePattern> {
        if let Some(t) = &self.topic {
            Some(ResourcePattern::Topic(t.clone()))
        } else if let Some(p) = &self.topic_prefix {
            Some(ResourcePattern::TopicPrefix(p.clone()))
        } else if self.cluster {
            Some(ResourcePattern::Cluster)
        } else {
            None
        }
    }
}

/// Allow or deny: one of these.
#[derive(Args, Debug, Clone)]
#[command(group(ArgGroup::new("permission").args(["allow", "deny"])))]
struct PermissionArgs {
    /// The binding allows.
    #[arg(long)]
    allow: bool,
    /// The binding denies (a deny wins over every allow).
    #[arg(long)]
    deny: bool,
}

impl PermissionArgs {
    fn permission(&self) -> Option<Permission> {
        if self.deny {
            Some(Permission::Deny)
        } else if self.allow {
            Some(Permission::Allow)
        } else {
            None
        }
    }
}

#[derive(Subcommand, Debug)]
enum AclsCmd {
    /// Add a binding: `--principal User:alice --operation create --topic
    /// orders --allow`.
    #[command(
        after_help = "Examples:\n  keel acls add --principal User:alice --operation create --topic-prefix orders- --allow\n  keel acls add --principal User:bob --operation delete --topic orders-eu --deny"
    )]
    Add {
        /// User:NAME (User:* for every user), Broker:ID or Controller:ID.
        #[arg(long)]
        principal: Principal,
        /// all, describe, create, delete, alter, describe-configs,
        /// alter-configs or cluster-action.
        #[arg(long)]
        operation: Operation,
        #[command(flatten)]
        resource: ResourceArgs,
        #[command(flatten)]
        permission: PermissionArgs,
    },
    /// Remove every binding that matches all the options given (at least
    /// one).
    #[command(
        after_help = "Example:\n  keel acls remove --principal User:alice --topic-prefix orders-"
    )]
    Remove(FilterArgs),
    /// List bindings, all or those matching the options given.
    #[command(after_help = "Example:\n  keel acls list --principal User:alice -o json")]
    List(FilterArgs),
}

/// The options that pick bindings, for `remove` and `list`.
#[derive(Args, Debug)]
struct FilterArgs {
    /// Only bindings of this principal (User:NAME, Broker:ID or
    /// Controller:ID).
    #[arg(long)]
    principal: Option<Principal>,
    /// Only bindings for this operation (all, describe, create, delete,
    /// alter, describe-configs, alter-configs or cluster-action).
    #[arg(long)]
    operation: Option<Operation>,
    #[command(flatten)]
    resource: ResourceArgs,
    #[command(flatten)]
    permission: PermissionArgs,
}

impl FilterArgs {
    /// The bindings these options match: those of every option given.
    fn filter(self) -> AclFilter {
        AclFilter {
            principal: self.principal,
            pattern: self.resource.pattern(),
            operation: self.operation,
            permission: self.permission.permission(),
        }
    }
}

fn binding_json(b: &AclBinding) -> serde_json::Value {
    json!({
        "principal": b.principal.to_string(),
        "resource": b.pattern.to_string(),
        "operation": b.operation.name(),
        "permission": b.permission.to_string(),
    })
}

fn binding_row(b: &AclBinding) -> Vec<String> {
    vec![
        b.principal.to_string(),
        b.pattern.to_string(),
        b.operation.name().to_string(),
        b.permission.to_string(),
    ]
}

const HEADER: [&str; 4] = ["PRINCIPAL", "RESOURCE", "OPERATION", "PERMISSION"];

/// The bindings of a response; one the server sent malformed is skipped
/// with a note on stderr.
fn bindings_from(v: &[pb::AclBinding]) -> Vec<AclBinding> {
    v.iter()
        .filter_map(|b| match acl_binding_from_pb(b) {
            Ok(b) => Some(b),
            Err(e) => {
                eprintln!("warning: the controller sent a binding this CLI cannot read: {e}");
                None
            }
        })
        .collect()
}

fn print_bindings(out: Output, key: &str, bindings: &[AclBinding]) {
    match out {
        Output::Json => output::json(&json!({
            key: bindings.iter().map(binding_json).collect::<Vec<_>>(),
        })),
        Output::Table => {
            let rows: Vec<Vec<String>> = bindings.iter().map(binding_row).collect();
            output::table(&HEADER, &rows);
        }
    }
}

/// Runs `keel acls`: add, remove or list bindings.
pub async fn acls(a: AclsArgs) -> ExitCode {
    let client = match a.common.client() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let out = a.common.output;
    match a.cmd {
        AclsCmd::Add {
            principal,
            operation,
            resource,
            permission,
        } => add(&client, out, principal, operation, &resource, &permission).await,
        AclsCmd::Remove(f) => remove(&client, out, f.filter()).await,
        AclsCmd::List(f) => list(&client, out, f.filter()).await,
    }
}

/// `acls add`: adds one binding.
async fn add(
    client: &ControllerClient,
    out: Output,
    principal: Principal,
    operation: Operation,
    resource: &ResourceArgs,
    permission: &PermissionArgs,
) -> ExitCode {
    let Some(pattern) = resource.pattern() else {
        return usage("name the resource: --topic, --topic-prefix or --cluster");
    };
    let Some(permission) = permission.permission() else {
        return usage("say --allow or --deny");
    };
    let binding = AclBinding {
        principal,
        pattern,
        operation,
        permission,
    };
    if let Err(why) = binding.validate() {
        return usage(why);
    }
    let req = pb::CreateAclsRequest {
        bindings: vec![acl_binding_to_pb(&binding)],
    };
    let r = call!(client, admin_write, create_acls, req);
    if let Some(e) = r.results.first().and_then(|r| item_error(&r.error)) {
        return output::refused(&e);
    }
    match out {
        Output::Json => output::json(&json!({ "added": binding_json(&binding) })),
        Output::Table => crate::outln!("Added: {binding}"),
    }
    ExitCode::SUCCESS
}

/// `acls remove`: removes every binding `filter` matches (it must name
/// something).
async fn remove(client: &ControllerClient, out: Output, filter: AclFilter) -> ExitCode {
    if filter == AclFilter::default() {
        return usage(
            "name at least one of --principal, --operation, --topic, --topic-prefix, \
             --cluster, --allow, --deny",
        );
    }
    let req = pb::DeleteAclsRequest {
        filters: vec![acl_filter_to_pb(&filter)],
    };
    let r = call!(client, admin_write, delete_acls, req);
    let removed = r
        .results
        .first()
        .map(|r| bindings_from(&r.removed))
        .unwrap_or_default();
    match out {
        Output::Json => print_bindings(Output::Json, "removed", &removed),
        Output::Table => {
            crate::outln!("Removed {} binding(s).", removed.len());
            if !removed.is_empty() {
                print_bindings(Output::Table, "removed", &removed);
            }
        }
    }
    ExitCode::SUCCESS
}

/// `acls list`: the bindings `filter` matches.
async fn list(client: &ControllerClient, out: Output, filter: AclFilter) -> ExitCode {
    let req = pb::DescribeAclsRequest {
        filter: Some(acl_filter_to_pb(&filter)),
    };
    let r = call!(client, admin, describe_acls, req);
    print_bindings(out, "acls", &bindings_from(&r.bindings));
    ExitCode::SUCCESS
}
