//! The attacks of a user without ACLs: every admin write and read it
//! may not make, as that user and as a stolen write session.

use super::*;

impl Intruder {
    /// An admin request `req` as the user without ACLs (`call` sends it),
    /// following NOT_CONTROLLER to the named leader (at most twice).
    pub(super) async fn as_user<Q, R, F, Fut>(
        &self,
        request: &str,
        target: String,
        first: &str,
        req: Q,
        call: F,
    ) where
        Q: Clone,
        R: Answered,
        F: Fn(AdminServiceClient<Channel>, Q) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        let t = &self.creds.user;
        let mut addr = first.to_string();
        for hop in 0..3 {
            let at = self.ms();
            let r = match Self::ch(t, &addr, Expect::Controller) {
                Some(ch) => {
                    let sent = call(AdminServiceClient::new(ch), req.clone());
                    match tokio::time::timeout(T * 2, sent).await {
                        Ok(r) => r.map(|r| r.into_inner()),
                        Err(_) => Err(tonic::Status::deadline_exceeded("no answer in time")),
                    }
                }
                None => Err(bad_address()),
            };
            let redirect = match &r {
                Ok(resp) => resp
                    .top()
                    .filter(|e| e.code == pb::ErrorCode::NotController as i32)
                    .and_then(|e| e.leader.as_ref())
                    .map(|l| l.address.clone())
                    .filter(|l| *l != addr && !l.is_empty()),
                Err(_) => None,
            };
            if let (Some(next), true) = (redirect, hop < 2) {
                addr = next;
                continue;
            }
            let c = classify_acl(&r);
            self.record(at, Credential::NoAcls, t, request, target, &addr, c);
            return;
        }
    }

    pub(super) async fn no_acls(
        &self,
        round: u32,
        active: &str,
        target: &str,
        y: u32,
        y_epoch: u64,
        p: Option<&pb::PartitionState>,
    ) {
        let name = format!("{CREATE_PREFIX}c{round}");
        let req = create_topics_request(vec![creatable(&name, 1, 1)]);
        self.as_user("CreateTopics", name, active, req, |mut c, req| async move {
            c.create_topics(req).await
        })
        .await;

        let workload = format!("jepsen-{}", round as usize % self.names.max(1));
        for victim in [target.to_string(), workload] {
            let req = pb::DeleteTopicsRequest {
                names: vec![victim.clone()],
            };
            self.as_user(
                "DeleteTopics",
                victim,
                active,
                req,
                |mut c, req| async move { c.delete_topics(req).await },
            )
            .await;
        }

        let req = pb::CreatePartitionsRequest {
            topics: vec![pb::CreatePartitionsTopic {
                name: target.into(),
                total: TARGET_PARTITIONS + 1,
                assignments: vec![],
            }],
            validate_only: false,
        };
        self.as_user(
            "CreatePartitions",
            target.into(),
            active,
            req,
            |mut c, req| async move { c.create_partitions(req).await },
        )
        .await;

        let req = set_config(target, FORGED_CONFIG.0.into(), FORGED_CONFIG.1.into());
        self.as_user(
            "IncrementalAlterConfigs",
            target.into(),
            active,
            req,
            |mut c, req| async move { c.incremental_alter_configs(req).await },
        )
        .await;

        let req = pb::ElectLeadersRequest {
            election_type: pb::ElectionType::Unclean as i32,
            partitions: vec![pb::TopicPartitionRef {
                topic: target.into(),
                partition: 0,
            }],
        };
        self.as_user(
            "ElectLeaders(unclean)",
            format!("{target}-0"),
            active,
            req,
            |mut c, req| async move { c.elect_leaders(req).await },
        )
        .await;

        let mut replicas: Vec<u32> = p.map(|p| p.replicas.clone()).unwrap_or_default();
        replicas.reverse();
        if replicas.len() > 1 {
            replicas.pop();
        } else {
            replicas = vec![y];
        }
        let req = pb::AlterPartitionReassignmentsRequest {
            partitions: vec![pb::ReassignablePartition {
                topic: target.into(),
                partition: 0,
                replicas: replicas.clone(),
                cancel: false,
            }],
        };
        self.as_user(
            "AlterPartitionReassignments",
            format!("{target}-0 -> {replicas:?}"),
            active,
            req,
            |mut c, req| async move { c.alter_partition_reassignments(req).await },
        )
        .await;

        self.as_user(
            "UnregisterBroker",
            format!("broker {y}"),
            active,
            pb::UnregisterBrokerRequest {
                broker_id: y,
                ..Default::default()
            },
            |mut c, req| async move { c.unregister_broker(req).await },
        )
        .await;

        let voter = (round as u64 % self.ctrl.len().max(1) as u64) + 1;
        self.as_user(
            "RemoveVoter",
            format!("node {voter}"),
            active,
            pb::RemoveVoterRequest {
                node_id: voter,
                ..Default::default()
            },
            |mut c, req| async move { c.remove_voter(req).await },
        )
        .await;
        self.as_user(
            "AddVoter",
            format!("node {FORGED_VOTER}"),
            active,
            pb::AddVoterRequest {
                node_id: FORGED_VOTER,
                address: FORGED_ADDRESS.into(),
                directory_id: String::new(),
                ..Default::default()
            },
            |mut c, req| async move { c.add_voter(req).await },
        )
        .await;

        let me = format!("User:{USER}");
        let binding = |resource| pb::AclBinding {
            principal: me.clone(),
            resource: Some(pb::AclResource {
                resource: Some(resource),
            }),
            operation: "all".into(),
            permission: pb::AclPermission::Allow as i32,
        };
        let req = pb::CreateAclsRequest {
            bindings: vec![
                binding(pb::acl_resource::Resource::Cluster(true)),
                binding(pb::acl_resource::Resource::TopicPrefix("i".into())),
                binding(pb::acl_resource::Resource::TopicPrefix("j".into())),
            ],
        };
        self.as_user(
            "CreateAcls",
            format!("{me} all"),
            active,
            req,
            |mut c, req| async move { c.create_acls(req).await },
        )
        .await;

        self.write_session(round, active, target).await;
        self.vote(round).await;
        self.leader_and_isr(round, y, y_epoch).await;
    }

    /// The same writes through a `Write` session (authorized as the
    /// session's caller): create a topic, delete a target.
    pub(super) async fn write_session(&self, round: u32, active: &str, target: &str) {
        use pb::write_request::Op;
        use pb::write_response::Result as Reply;
        let t = &self.creds.user;
        let name = format!("{CREATE_PREFIX}w{round}");
        let writes = vec![
            pb::WriteRequest {
                id: 1,
                op: Some(Op::CreateTopics(create_topics_request(vec![creatable(
                    &name, 1, 1,
                )]))),
            },
            pb::WriteRequest {
                id: 2,
                op: Some(Op::DeleteTopics(pb::DeleteTopicsRequest {
                    names: vec![target.to_string()],
                })),
            },
        ];
        let at = self.ms();
        let session = async {
            let ch = Self::ch(t, active, Expect::Controller).ok_or_else(bad_address)?;
            let mut answers = AdminServiceClient::new(ch)
                .write(tokio_stream::iter(writes))
                .await?
                .into_inner();
            let mut out = BTreeMap::new();
            while out.len() < 2 {
                match answers.message().await? {
                    Some(m) => {
                        out.insert(m.id, m.result);
                    }
                    None => break,
                }
            }
            Ok::<_, tonic::Status>(out)
        };
        let answers = match tokio::time::timeout(T * 2, session).await {
            Ok(r) => r,
            Err(_) => Err(tonic::Status::deadline_exceeded("no answer in time")),
        };
        for (id, request, aim) in [
            (1u64, "Write(CreateTopics)", name),
            (2, "Write(DeleteTopics)", target.to_string()),
        ] {
            let c = match &answers {
                Err(s) => classify_cert::<()>(&Err(s.clone()), false),
                Ok(m) => match m.get(&id) {
                    None | Some(None) => (Answer::Errored, "no answer in the session".into()),
                    Some(Some(Reply::CreateTopics(r))) => classify_acl(&Ok(r.clone())),
                    Some(Some(Reply::DeleteTopics(r))) => classify_acl(&Ok(r.clone())),
                    Some(Some(Reply::Error(e))) => classify_acl(&Ok(pb::RemoveVoterResponse {
                        error: Some(e.clone()),
                        ..Default::default()
                    })),
                    Some(Some(other)) => (
                        Answer::Accepted,
                        format!("answered with another op: {other:?}"),
                    ),
                },
            };
            self.record(at, Credential::NoAcls, t, request, aim, active, c);
        }
    }
}
