"""kafka.KafkaAdminClient (kafka-python, pure Python) against a Keel
broker's Kafka listener. Usage: kafka_python_admin.py BOOTSTRAP PREFIX

Security settings (KafkaAdminClient keyword arguments: security_protocol,
ssl_*, sasl_*) come as one JSON object in $KEEL_KAFKA_CONFIG.

Prints one JSON object: for each step the error class name (null on
success) and what was read back. Asserted on by tests/kafka_admin.rs."""

import json
import sys

from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

import kafka_clients
from kafka_clients import errors, kafka_python_admin, settled

bootstrap, prefix = sys.argv[1], sys.argv[2]
admin = kafka_python_admin(bootstrap)
out = {}


def attempt(step, f):
    """out[step] = f(), or the name of the error it raised."""
    kafka_clients.attempt(out, step, f)


def ours():
    return sorted(t for t in admin.list_topics() if t.startswith(prefix))


topic = prefix + "kp"
attempt("create", lambda: errors(admin.create_topics(
    [NewTopic(topic, num_partitions=2, replication_factor=2,
              topic_configs={"retention.ms": "5000"})])))
attempt("create_duplicate", lambda: errors(admin.create_topics(
    [NewTopic(topic, num_partitions=2, replication_factor=2)])))
attempt("list_topics", lambda: settled(ours, [topic]))


def configs():
    r = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    res = r[0].resources[0]
    # (error_code, error_message, type, name, [(name, value, read_only, default?, sensitive)...])
    return {"error": res[0], "retention.ms": {c[0]: c[1] for c in res[4]}.get("retention.ms")}


attempt("describe_configs", configs)
attempt("alter_configs", lambda: [r[0] for r in admin.alter_configs(
    [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "7000"})]
).resources])
attempt("describe_configs_after", configs)


def sources(res_type, name, keys=None):
    """{name: [value, config source]} (DescribeConfigs v1 carries sources).
    A broker lists the cluster-wide defaults (kafka-python cannot name the
    default broker resource, whose name is empty)."""
    r = admin.describe_configs([ConfigResource(res_type, name)])
    res = r[0].resources[0]
    # v1: (error_code, error_message, type, name, [(name, value, read_only, source, sensitive, synonyms)])
    return {"error": res[0],
            "configs": {c[0]: [c[1], c[3]] for c in res[4] if keys is None or c[0] in keys}}


def alter(res_type, name, configs):
    return [r[0] for r in admin.alter_configs(
        [ConfigResource(res_type, name, configs=configs)]).resources]


B, T = ConfigResourceType.BROKER, ConfigResourceType.TOPIC
plain = prefix + "plain"
admin.create_topics([NewTopic(plain, num_partitions=1, replication_factor=1)])
attempt("set_default", lambda: alter(B, "", {"log.retention.ms": "123456"}))
attempt("defaults", lambda: sources(B, "1"))
attempt("with_default", lambda: sources(T, plain, {"retention.ms", "segment.ms"}))
attempt("set_bad_default", lambda: alter(B, "", {"log.retention.ms": "soon"}))
attempt("replace_defaults", lambda: alter(B, "", {"log.segment.bytes": "1048576"}))
attempt("defaults_after_replace", lambda: sources(B, "1"))
attempt("with_default_after_replace", lambda: sources(T, plain, {"retention.ms", "segment.ms"}))
attempt("clear_defaults", lambda: alter(B, "", {}))
admin.delete_topics([plain])

attempt("describe_cluster", lambda: {
    k: v for k, v in admin.describe_cluster().items() if k in ("cluster_id", "controller_id")}
    | {"brokers": sorted(b["node_id"] for b in admin.describe_cluster()["brokers"])})
attempt("delete", lambda: errors(admin.delete_topics([topic]), "topic_error_codes"))
attempt("list_topics_after", lambda: settled(ours, []))
admin.close()
print(json.dumps(out, sort_keys=True))
