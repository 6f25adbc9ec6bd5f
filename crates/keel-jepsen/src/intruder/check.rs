//! The intruder checker: the state of the target topics and brokers read
//! as admin before and after the run, every attempt's answer, and the
//! verdict (nothing refused may have changed anything).

use super::*;

/// What the checker compares before and after the run (read as admin).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Every topic whose name starts with `intruder-`.
    pub topics: BTreeMap<String, TopicState>,
    /// Every ACL binding, as text.
    pub acls: BTreeSet<String>,
    pub voters: Vec<u64>,
    pub brokers: BTreeMap<u32, BrokerState>,
    /// Raft term per controller that answered.
    pub terms: BTreeMap<u64, u64>,
    /// Controller epoch each broker that answered has seen.
    pub controller_epochs_seen: BTreeMap<u32, u64>,
}

/// A partition's number, replicas, replicas being added, being removed.
pub type PartitionReplicas = (u32, Vec<u32>, Vec<u32>, Vec<u32>);

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicState {
    pub topic_id: String,
    pub marked_for_deletion: bool,
    pub replicas: Vec<PartitionReplicas>,
    pub configs: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerState {
    pub address: String,
    pub incarnation: String,
}

/// Creates the target topics as admin (bounded); `Err` names what failed.
pub async fn create_targets(
    admin: &mut client::AdminClient,
    replication_factor: u32,
    bound: Duration,
) -> Result<(), String> {
    let start = Instant::now();
    for name in targets() {
        loop {
            let r = admin
                .create(&name, TARGET_PARTITIONS, replication_factor)
                .await;
            let done = r.outcome == Some(crate::history::Outcome::Ok)
                || r.error.as_deref() == Some("TOPIC_ALREADY_EXISTS");
            if done {
                break;
            }
            if start.elapsed() > bound {
                return Err(format!(
                    "cannot create {name}: {:?} {:?}",
                    r.error, r.message
                ));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    Ok(())
}

/// Reads the state the checker compares, as admin, from the active
/// controller (and every node for terms and epochs); retried until
/// `bound`. `Err`: what could not be read.
pub async fn observe(
    admin: &Transport,
    ctrl: &[String],
    brokers: &[(u32, String)],
    bound: Duration,
) -> Result<State, String> {
    let start = Instant::now();
    loop {
        match observe_once(admin, ctrl, brokers).await {
            Ok(s) => return Ok(s),
            Err(e) if start.elapsed() >= bound => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

async fn observe_once(
    admin: &Transport,
    ctrl: &[String],
    brokers: &[(u32, String)],
) -> Result<State, String> {
    let active = client::find_active(admin, ctrl, T)
        .await
        .ok_or("no active controller")?;
    let ch =
        client::client_channel(admin, &active, T * 4, Expect::Controller).ok_or("bad address")?;
    let mut c = AdminServiceClient::new(ch);
    let mut s = State::default();

    let ts = c
        .describe_topics(pb::DescribeTopicsRequest::default())
        .await
        .map_err(|e| format!("describe topics: {e}"))?
        .into_inner();
    if let Some(e) = ts.error {
        return Err(format!("describe topics: {}", e.message));
    }
    for t in ts
        .topics
        .into_iter()
        .filter(|t| t.name.starts_with("intruder-"))
    {
        let mut replicas: Vec<PartitionReplicas> = t
            .partitions
            .iter()
            .filter_map(|p| p.state.as_ref())
            .map(|p| {
                (
                    p.partition,
                    p.replicas.clone(),
                    p.adding.clone(),
                    p.removing.clone(),
                )
            })
            .collect();
        replicas.sort();
        s.topics.insert(
            t.name.clone(),
            TopicState {
                topic_id: TopicId::from_bytes(&t.topic_id)
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| hex(&t.topic_id)),
                marked_for_deletion: t.marked_for_deletion,
                replicas,
                configs: t.configs.into_iter().map(|c| (c.key, c.value)).collect(),
            },
        );
    }

    let acls = c
        .describe_acls(pb::DescribeAclsRequest { filter: None })
        .await
        .map_err(|e| format!("describe acls: {e}"))?
        .into_inner();
    if let Some(e) = acls.error {
        return Err(format!("describe acls: {}", e.message));
    }
    s.acls = acls
        .bindings
        .iter()
        .map(|b| {
            format!(
                "{} {:?} {} {:?}",
                b.principal,
                b.resource.as_ref().and_then(|r| r.resource.clone()),
                b.operation,
                pb::AclPermission::try_from(b.permission)
            )
        })
        .collect();

    let q = c
        .describe_quorum(pb::DescribeQuorumRequest::default())
        .await
        .map_err(|e| format!("describe quorum: {e}"))?
        .into_inner();
    if let Some(e) = q.error {
        return Err(format!("describe quorum: {}", e.message));
    }
    s.voters = q.voters.iter().map(|v| v.id).collect();
    s.voters.sort();

    let cl = c
        .describe_cluster(pb::DescribeClusterRequest::default())
        .await
        .map_err(|e| format!("describe cluster: {e}"))?
        .into_inner();
    if let Some(e) = cl.error {
        return Err(format!("describe cluster: {}", e.message));
    }
    for b in &cl.brokers {
        if let Some(info) = &b.broker {
            s.brokers.insert(
                info.broker_id,
                BrokerState {
                    address: info.address.clone(),
                    incarnation: hex(&b.incarnation_id),
                },
            );
        }
    }
    // Brokers first, then terms: a term only grows, so every broker's
    // epoch was at most the quorum's term when the terms are read.
    for (id, a) in brokers {
        if let Some(d) = client::describe_broker(admin, a, T).await {
            s.controller_epochs_seen
                .insert(*id, d.controller_epoch_seen);
        }
    }
    for a in ctrl {
        if let Some(d) = client::describe_node(admin, a, T).await {
            s.terms.insert(d.node_id, d.term);
        }
    }
    Ok(s)
}

/// Counts of attempts by answer.
pub fn counts(attempts: &[Attempt]) -> (usize, usize, usize) {
    let c = |a: Answer| attempts.iter().filter(|x| x.answer == a).count();
    (c(Answer::Refused), c(Answer::Errored), c(Answer::Accepted))
}

/// [`check_with_kafka`] of a run without Kafka listeners.
pub fn check(
    attempts: &[Attempt],
    before: Option<&State>,
    after: Option<&State>,
    histories: &BTreeMap<u32, Vec<BrokerEvent>>,
) -> (bool, Value) {
    check_with_kafka(attempts, before, after, histories, false)
}

/// The intruder checker: valid when attempts were made, none was accepted,
/// nothing the intruder tried shows in `after` compared with `before` or
/// in the brokers' histories, and, when the run has Kafka listeners
/// (`kafka`), every kind of Kafka attack was refused at least once (an
/// attack never answered proves nothing).
pub fn check_with_kafka(
    attempts: &[Attempt],
    before: Option<&State>,
    after: Option<&State>,
    histories: &BTreeMap<u32, Vec<BrokerEvent>>,
    kafka: bool,
) -> (bool, Value) {
    let (refused, errored, accepted) = counts(attempts);
    let mut violations: Vec<Value> = Vec::new();
    for a in attempts.iter().filter(|a| a.answer == Answer::Accepted) {
        violations.push(json!({"accepted": a}));
    }
    let mut unknown = Vec::new();
    if attempts.is_empty() {
        unknown.push("the intruder made no attempt: it proves nothing".to_string());
    }
    let made = |kind: Credential| attempts.iter().filter(|a| a.credential == kind).count();
    let refused_of = |kind: Credential| {
        attempts
            .iter()
            .filter(|a| a.credential == kind && a.answer == Answer::Refused)
            .count()
    };
    let floods: Vec<&Attempt> = attempts
        .iter()
        .filter(|a| a.credential == Credential::Flood)
        .collect();
    if !floods.is_empty()
        && !floods
            .iter()
            .any(|a| a.detail.contains(super::flood::ADMIN_ANSWERED))
    {
        unknown.push(format!(
            "no admin request was answered during any of {} floods: the listener's limits are unproven",
            floods.len()
        ));
    }
    if !floods.is_empty() && refused_of(Credential::Flood) == 0 {
        unknown.push(format!(
            "no flood's silent connections were all closed by the listener ({} floods)",
            floods.len()
        ));
    }
    if made(Credential::ControllerKey) > 0 && refused_of(Credential::ControllerKey) == 0 {
        unknown.push(format!(
            "no controller_key attempt was refused ({} made): the brokers' epoch fence is unproven",
            made(Credential::ControllerKey)
        ));
    }
    if kafka {
        for kind in Credential::KAFKA {
            let of = |answer: Option<Answer>| {
                attempts
                    .iter()
                    .filter(|a| a.credential == kind && answer.is_none_or(|x| a.answer == x))
                    .count()
            };
            if of(Some(Answer::Refused)) == 0 {
                unknown.push(format!(
                    "no {} attempt was refused ({} made): the Kafka listeners' check is unproven",
                    kind.name(),
                    of(None)
                ));
            }
        }
    }
    match (before, after) {
        (Some(b), Some(a)) => state_violations(b, a, &mut violations),
        (b, a) => {
            if b.is_none() {
                unknown.push("the state before the run could not be read".into());
            }
            if a.is_none() {
                unknown.push("the state after the run could not be read".into());
            }
        }
    }
    for (id, events) in histories {
        for e in events.iter().filter(|e| e.controller_epoch >= FORGED_EPOCH) {
            violations.push(
                json!({"broker_history_with_forged_controller_epoch": {"broker": id, "line": e}}),
            );
        }
    }
    let mut by_request: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for a in attempts {
        let key = format!(
            "{} {}",
            serde_json::to_value(a.credential)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default(),
            a.request
        );
        let answer = serde_json::to_value(a.answer)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        *by_request
            .entry(key)
            .or_default()
            .entry(answer)
            .or_default() += 1;
    }
    let valid = violations.is_empty() && unknown.is_empty();
    let count = violations.len();
    violations.truncate(20);
    (
        valid,
        json!({
            "attempts": attempts.len(),
            "refused": refused,
            "errored": errored,
            "accepted": accepted,
            "by_request": by_request,
            "violations": violations,
            "violation_count": count,
            "cannot_tell": unknown,
        }),
    )
}

fn state_violations(before: &State, after: &State, out: &mut Vec<Value>) {
    for (name, t) in &after.topics {
        if name.starts_with(CREATE_PREFIX) {
            out.push(json!({"intruder_topic_exists": {"name": name, "topic": t}}));
        }
    }
    for name in targets() {
        let was = before.topics.get(&name);
        let now = after.topics.get(&name);
        match (was, now) {
            (Some(w), Some(n)) if w == n => {}
            (None, _) => out.push(json!({"target_topic_missing_before_the_run": name})),
            (Some(w), n) => out.push(json!({"target_topic_changed": {
                "name": name, "before": w, "after": n,
            }})),
        }
    }
    let new_acls: Vec<&String> = after.acls.difference(&before.acls).collect();
    if !new_acls.is_empty() {
        out.push(json!({"acl_bindings_appeared": new_acls}));
    }
    if after.voters != before.voters {
        out.push(json!({"voters_changed": {"before": before.voters, "after": after.voters}}));
    }
    for (id, b) in &before.brokers {
        match after.brokers.get(id) {
            None => out.push(json!({"broker_gone": id})),
            Some(a) if a.address != b.address => out.push(json!({"broker_address_changed": {
                "broker": id, "before": b.address, "after": a.address,
            }})),
            Some(_) => {}
        }
    }
    let forged = hex(&FORGED_INCARNATION);
    for (id, a) in &after.brokers {
        if !before.brokers.contains_key(id) {
            out.push(json!({"broker_appeared": {"broker": id, "state": a}}));
        }
        if a.incarnation == forged || a.address == FORGED_ADDRESS {
            out.push(json!({"broker_registered_by_the_intruder": {"broker": id, "state": a}}));
        }
    }
    for (id, term) in &after.terms {
        if *term >= FORGED_EPOCH {
            out.push(json!({"controller_in_forged_term": {"node": id, "term": term}}));
        }
    }
    for (id, e) in &after.controller_epochs_seen {
        if *e >= FORGED_EPOCH {
            out.push(json!({"broker_saw_forged_controller_epoch": {"broker": id, "epoch": e}}));
        }
    }
    // A broker fenced above every controller's term refuses the real
    // controller: locked out until the quorum's term catches up.
    if let Some(top) = after.terms.values().max() {
        for (id, e) in &after.controller_epochs_seen {
            if e > top {
                out.push(json!({"broker_locked_out_of_the_controller": {
                    "broker": id, "controller_epoch_seen": e, "highest_term": top,
                }}));
            }
        }
    }
}

/// Writes the attempts as JSON lines.
pub fn write_attempts(path: &Path, attempts: &[Attempt]) -> std::io::Result<()> {
    crate::history::write_json_lines(path, attempts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kafka_attempt(credential: Credential, answer: Answer) -> Attempt {
        Attempt {
            at_ms: 1.0,
            credential,
            identity: "User:intruder-scram (replayed client-final)".into(),
            request: "SaslAuthenticate".into(),
            target: format!("{CREATE_PREFIX}kr0"),
            node: "127.0.2.21:9094".into(),
            answer,
            detail: String::new(),
        }
    }

    /// The checker's verdict on `attempts` without broker histories, for a
    /// run with Kafka listeners or (`kafka` false) without.
    fn judged(attempts: &[Attempt], before: &State, after: &State, kafka: bool) -> (bool, Value) {
        check_with_kafka(attempts, Some(before), Some(after), &BTreeMap::new(), kafka)
    }

    fn every_kafka_attack_refused() -> Vec<Attempt> {
        Credential::KAFKA
            .iter()
            .map(|c| kafka_attempt(*c, Answer::Refused))
            .collect()
    }

    /// The cluster as the intruder found it: every target topic, nothing
    /// else.
    fn targets_untouched() -> State {
        State {
            topics: targets()
                .into_iter()
                .map(|t| (t, TopicState::default()))
                .collect(),
            ..State::default()
        }
    }

    #[test]
    fn kafka_attacks_all_refused_and_nothing_written_pass() {
        let before = targets_untouched();
        let (valid, detail) = judged(&every_kafka_attack_refused(), &before, &before, true);
        assert!(valid, "{detail}");
    }

    #[test]
    fn an_accepted_kafka_replay_fails_the_intruder_checker() {
        let before = targets_untouched();
        let mut attempts = every_kafka_attack_refused();
        attempts.push(kafka_attempt(Credential::KafkaReplay, Answer::Accepted));
        let (valid, detail) = judged(&attempts, &before, &before, true);
        assert!(!valid);
        assert_eq!(detail["accepted"], 1);
        assert_eq!(detail["violation_count"], 1);
    }

    #[test]
    fn a_topic_made_by_a_kafka_attack_fails_the_intruder_checker_even_if_refused() {
        let before = targets_untouched();
        let mut after = before.clone();
        after
            .topics
            .insert(format!("{CREATE_PREFIX}kp3"), TopicState::default());
        let (valid, detail) = judged(&every_kafka_attack_refused(), &before, &after, true);
        assert!(!valid);
        assert!(
            detail["violations"][0]["intruder_topic_exists"].is_object(),
            "{detail}"
        );
    }

    #[test]
    fn a_kafka_attack_never_refused_leaves_the_intruder_checker_unconvinced() {
        let before = targets_untouched();
        let mut attempts: Vec<Attempt> = every_kafka_attack_refused()
            .into_iter()
            .filter(|a| a.credential != Credential::KafkaNodeCert)
            .collect();
        attempts.push(kafka_attempt(Credential::KafkaNodeCert, Answer::Errored));
        let (valid, detail) = judged(&attempts, &before, &before, true);
        assert!(!valid);
        assert!(detail["cannot_tell"][0]
            .as_str()
            .unwrap()
            .contains("kafka_node_cert"));
        // A run without Kafka listeners asks for none.
        let grpc_only = vec![Attempt {
            credential: Credential::NoAcls,
            ..kafka_attempt(Credential::NoAcls, Answer::Refused)
        }];
        let (valid, detail) = judged(&grpc_only, &before, &before, false);
        assert!(valid, "{detail}");
    }

    #[test]
    fn a_broker_fenced_above_every_term_fails_the_intruder_checker() {
        let mut before = targets_untouched();
        before.terms = BTreeMap::from([(1, 5), (2, 5), (3, 4)]);
        before.controller_epochs_seen = BTreeMap::from([(1, 5), (2, 5)]);
        let refused = vec![kafka_attempt(Credential::ControllerKey, Answer::Refused)];
        let (valid, detail) = check(&refused, Some(&before), Some(&before), &BTreeMap::new());
        assert!(valid, "{detail}");
        // Below the forged range, yet above every term: locked out.
        let mut after = before.clone();
        after.controller_epochs_seen.insert(2, 6);
        let (valid, detail) = check(&refused, Some(&before), Some(&after), &BTreeMap::new());
        assert!(!valid);
        assert_eq!(
            detail["violations"][0]["broker_locked_out_of_the_controller"]["broker"], 2,
            "{detail}"
        );
    }

    #[test]
    fn controller_key_attempts_never_refused_leave_the_intruder_checker_unconvinced() {
        let before = targets_untouched();
        let errored = vec![kafka_attempt(Credential::ControllerKey, Answer::Errored)];
        let (valid, detail) = check(&errored, Some(&before), Some(&before), &BTreeMap::new());
        assert!(!valid);
        assert!(
            detail["cannot_tell"][0]
                .as_str()
                .unwrap()
                .contains("controller_key"),
            "{detail}"
        );
    }

    #[test]
    fn a_flood_must_be_closed_and_leave_the_admin_answered() {
        let before = targets_untouched();
        let flood = |answer: Answer, detail: &str| Attempt {
            detail: detail.into(),
            ..kafka_attempt(Credential::Flood, answer)
        };
        let good = flood(
            Answer::Refused,
            "64 closed; admin answered during the flood (12 ms)",
        );
        let (valid, detail) = check(
            std::slice::from_ref(&good),
            Some(&before),
            Some(&before),
            &BTreeMap::new(),
        );
        assert!(valid, "{detail}");
        // A silent connection kept past the bound is a breach.
        let kept = flood(
            Answer::Accepted,
            "63 closed; admin answered during the flood (12 ms)",
        );
        let (valid, _) = check(
            &[good.clone(), kept],
            Some(&before),
            Some(&before),
            &BTreeMap::new(),
        );
        assert!(!valid);
        // Closed, but the admin was never answered: unproven.
        let starved = flood(
            Answer::Refused,
            "64 closed; admin not answered during the flood",
        );
        let (valid, detail) = check(&[starved], Some(&before), Some(&before), &BTreeMap::new());
        assert!(!valid);
        assert!(
            detail["cannot_tell"][0].as_str().unwrap().contains("admin"),
            "{detail}"
        );
    }
}
