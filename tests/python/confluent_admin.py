"""confluent_kafka.admin.AdminClient (librdkafka) against a Keel broker's
Kafka listener. Usage: confluent_admin.py BOOTSTRAP PREFIX

Security settings (librdkafka properties: security.protocol, ssl.*,
sasl.*) come as one JSON object in $KEEL_KAFKA_CONFIG.

Runs every admin call once and prints one JSON object: for each step, the
error name librdkafka reports (null on success) and what was read back.
The Rust test (tests/kafka_admin.rs) asserts on it."""

import json
import sys

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewPartitions, NewTopic)
from confluent_kafka import ElectionType

from kafka_clients import confluent_admin, error_of, name, settled

bootstrap, prefix = sys.argv[1], sys.argv[2]
admin = confluent_admin(bootstrap)
out = {}


def create(step, topic, **kw):
    fs = admin.create_topics([topic], request_timeout=30, **kw)
    out[step] = error_of(fs[topic.topic])


def partitions_of(topic):
    md = admin.list_topics(timeout=20)
    t = md.topics.get(topic)
    return None if t is None or t.error is not None else len(t.partitions)


plain, validate, configs = prefix + "plain", prefix + "validate", prefix + "configs"
create("create_plain", NewTopic(plain, num_partitions=3, replication_factor=2))
create("create_validate_only", NewTopic(validate, num_partitions=1, replication_factor=1),
       validate_only=True)
create("create_with_configs", NewTopic(configs, num_partitions=1, replication_factor=1,
                                       config={"retention.ms": "1000", "cleanup.policy": "compact"}))
create("create_duplicate", NewTopic(plain, num_partitions=1, replication_factor=1))
create("create_bad_name", NewTopic(prefix + "bad/name", num_partitions=1, replication_factor=1))
create("create_rf_too_large", NewTopic(prefix + "rf", num_partitions=1, replication_factor=10))
create("create_bad_config", NewTopic(prefix + "badcfg", num_partitions=1, replication_factor=1,
                                     config={"retention.ms": "soon"}))

def ours():
    return sorted(n for n in admin.list_topics(timeout=20).topics if n.startswith(prefix))


out["list_topics"] = settled(ours, [configs, plain])
out["plain_partitions"] = partitions_of(plain)

fs = admin.create_partitions([NewPartitions(plain, 5)], request_timeout=30)
out["create_partitions"] = error_of(fs[plain])
fs = admin.create_partitions([NewPartitions(plain, 2)], request_timeout=30)
out["create_partitions_fewer"] = error_of(fs[plain])
out["plain_partitions_after"] = settled(lambda: partitions_of(plain), 5)


def described(topic):
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    fs = admin.describe_configs([res], request_timeout=30)
    try:
        entries = fs[res].result(timeout=30)
    except KafkaException as e:
        return name(e.args[0])
    return {k: {"value": v.value, "default": v.is_default} for k, v in entries.items()}


d = described(configs)
out["describe_configs"] = {k: d[k] for k in ("retention.ms", "cleanup.policy", "segment.ms")}
out["describe_configs_unknown"] = described(prefix + "nosuch")

res = ConfigResource(ConfigResource.Type.TOPIC, configs, incremental_configs=[
    ConfigEntry("retention.ms", "2000", incremental_operation=AlterConfigOpType.SET),
    ConfigEntry("cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE),
])
out["incremental_alter_configs"] = error_of(admin.incremental_alter_configs([res])[res])
d = described(configs)
out["configs_after_alter"] = {k: d[k] for k in ("retention.ms", "cleanup.policy")}
bad = ConfigResource(ConfigResource.Type.TOPIC, configs, incremental_configs=[
    ConfigEntry("retention.ms", "-7", incremental_operation=AlterConfigOpType.SET)])
out["incremental_alter_bad_value"] = error_of(admin.incremental_alter_configs([bad])[bad])



def incremental(res_type, res_name, key, value, op):
    r = ConfigResource(res_type, res_name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op)])
    return error_of(admin.incremental_alter_configs([r])[r])


TOPIC, BROKER = ConfigResource.Type.TOPIC, ConfigResource.Type.BROKER
# APPEND and SUBTRACT on a list config, from the value in force.
out["append"] = incremental(TOPIC, configs, "cleanup.policy", "compact", AlterConfigOpType.APPEND)
out["after_append"] = described(configs)["cleanup.policy"]["value"]
out["subtract"] = incremental(TOPIC, configs, "cleanup.policy", "delete", AlterConfigOpType.SUBTRACT)
out["after_subtract"] = described(configs)["cleanup.policy"]["value"]
out["append_not_a_list"] = incremental(TOPIC, configs, "retention.ms", "5", AlterConfigOpType.APPEND)
# Keel keeps no config of one broker (librdkafka cannot name the default
# broker resource, whose name is empty; kafka_python_admin.py does).
out["set_named_broker"] = incremental(BROKER, "1", "log.retention.ms", "1", AlterConfigOpType.SET)

cl = admin.describe_cluster(request_timeout=30).result(timeout=30)
out["describe_cluster"] = {
    "cluster_id": cl.cluster_id,
    "controller": cl.controller.id if cl.controller else None,
    "nodes": sorted(n.id for n in cl.nodes),
}



def elected(election, partition):
    """An `election` of plain's `partition`: {topic-partition: its error
    as NAME(code), null when elected}, or the request's error."""
    # elect_leaders takes no keyword arguments in 2.6.1 (its C binding's
    # format string is wrong), so it runs with the client's defaults.
    try:
        r = admin.elect_leaders(election, [TopicPartition(plain, partition)]).result(timeout=30)
        return {f"{tp.topic}-{tp.partition}": (name(err) if err else None) for tp, err in r.items()}
    except KafkaException as e:
        return name(e.args[0])


out["elect_leaders_preferred"] = elected(ElectionType.PREFERRED, 0)
out["elect_leaders_unclean"] = elected(ElectionType.UNCLEAN, 1)

fs = admin.delete_topics([plain, configs], request_timeout=30)
out["delete_topics"] = {n: error_of(f) for n, f in fs.items()}
fs = admin.delete_topics([prefix + "nosuch"], request_timeout=30)
out["delete_unknown"] = error_of(fs[prefix + "nosuch"])

print(json.dumps(out, sort_keys=True))
