//! The attacks of a user without ACLs: every admin write and read it
//! may not make, as that user and as a stolen write session.

use super::*;

impl Intruder {
    /// An admin request as the user without ACLs, following NOT_CONTROLLER
    /// to the named leader (at most twice).
    pub(super) async fn as_user<R, F, Fut>(
        &self,
        request: &str,
        target: String,
        first: &str,
        call: F,
    ) where
        R: Answered,
        F: Fn(AdminServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        let t = &self.creds.user;
        let mut addr = first.to_string();
        for hop in 0..3 {
            let at = self.ms();
            let r = match Self::ch(t, &addr, Expect::Controller) {
                Some(ch) => {
                    match tokio::time::timeout(T * 2, call(AdminServiceClient::new(ch))).await {
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
        let req = pb::CreateTopicsRequest {
            topics: vec![pb::CreatableTopic {
                name: name.clone(),
                partitions: 1,
                replication_factor: 1,
                ..Default::default()
            }],
            validate_only: false,
        };
        self.as_user("CreateTopics", name, active, |mut c| {
            let req = req.clone();
            async move { c.create_topics(req).await }
        })
        .await;

        let workload = format!("jepsen-{}", round as usize % self.names.max(1));
        for victim in [target.to_string(), workload] {
            let req = pb::DeleteTopicsRequest {
                names: vec![victim.clone()],
            };
            self.as_user("DeleteTopics", victim, active, |mut c| {
                let req = req.clone();
                async move { c.delete_topics(req).await }
            })
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
        self.as_user("CreatePartitions", target.into(), active, |mut c| {
            let req = req.clone();
            async move { c.create_partitions(req).await }
        })
        .await;

        let req = pb::IncrementalAlterConfigsRequest {
            topics: vec![pb::AlterTopicConfig {
                topic: target.into(),
                ops: vec![pb::AlterConfigOp {
                    key: FORGED_CONFIG.0.into(),
                    value: FORGED_CONFIG.1.into(),
                    op: pb::ConfigOp::Set as i32,
                }],
            }],
            validate_only: false,
        };
        self.as_user("IncrementalAlterConfigs", target.into(), active, |mut c| {
            let req = req.clone();
            async move { c.incremental_alter_configs(req).await }
        })
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
            |mut c| {
                let req = req.clone();
                async move { c.elect_leaders(req).await }
            },
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
            |mut c| {
                let req = req.clone();
                async move { c.alter_partition_reassignments(req).await }
            },
        )
        .await;

        self.as_user(
            "UnregisterBroker",
            format!("broker {y}"),
            active,
            |mut c| async move {
                c.unregister_broker(pb::UnregisterBrokerRequest {
                    broker_id: y,
                    ..Default::default()
                })
                .await
            },
        )
        .await;

        let voter = (round as u64 % self.ctrl.len().max(1) as u64) + 1;
        self.as_user(
            "RemoveVoter",
            format!("node {voter}"),
            active,
            |mut c| async move {
                c.remove_voter(pb::RemoveVoterRequest {
                    node_id: voter,
                    ..Default::default()
                })
                .await
            },
        )
        .await;
        self.as_user(
            "AddVoter",
            format!("node {FORGED_VOTER}"),
            active,
            |mut c| async move {
                c.add_voter(pb::AddVoterRequest {
                    node_id: FORGED_VOTER,
                    address: FORGED_ADDRESS.into(),
                    directory_id: String::new(),
                    ..Default::default()
                })
                .await
            },
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
        self.as_user("CreateAcls", format!("{me} all"), active, |mut c| {
            let req = req.clone();
            async move { c.create_acls(req).await }
        })
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
                op: Some(Op::CreateTopics(pb::CreateTopicsRequest {
                    topics: vec![pb::CreatableTopic {
                        name: name.clone(),
                        partitions: 1,
                        replication_factor: 1,
                        ..Default::default()
                    }],
                    validate_only: false,
                })),
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
