"""kafka.KafkaAdminClient (kafka-python) as a user whose ACLs grant topics
under one prefix only. Usage:
kafka_python_acls.py BOOTSTRAP PREFIX FORBIDDEN HIDDEN

Creates, describes, alters and deletes PREFIX + "kp"; tries FORBIDDEN (a
topic name the user is granted nothing on; it does not exist) and HIDDEN
(an existing topic the user may not even see). Security settings
(KafkaAdminClient keyword arguments) come as one JSON object in
$KEEL_KAFKA_CONFIG. Prints one JSON object: for each step the error class
name or Kafka error code, or what was read back. Asserted on by
tests/kafka_admin.rs."""

import json
import sys

from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic

import kafka_clients
from kafka_clients import errors, kafka_python_admin, settled

bootstrap, prefix, forbidden, hidden = sys.argv[1:5]
admin = kafka_python_admin(bootstrap)
out = {}
T = ConfigResourceType.TOPIC


def attempt(step, f):
    """out[step] = f(), or the name of the error it raised."""
    kafka_clients.attempt(out, step, f)


def configs(topic):
    res = admin.describe_configs([ConfigResource(T, topic)])[0].resources[0]
    # (error_code, error_message, type, name, [(name, value, ...)...])
    return {"error": res[0], "retention.ms": {c[0]: c[1] for c in res[4]}.get("retention.ms")}


def alter(topic, values):
    return [r[0] for r in admin.alter_configs([ConfigResource(T, topic, configs=values)]).resources]


mine = prefix + "kp"
attempt("create", lambda: errors(admin.create_topics(
    [NewTopic(mine, num_partitions=2, replication_factor=2,
              topic_configs={"retention.ms": "5000"})])))
attempt("visible", lambda: settled(lambda: sorted(admin.list_topics()), [mine]))
attempt("hidden_by_name", lambda: [t["error_code"] for t in admin.describe_topics([hidden])])
attempt("describe_configs", lambda: configs(mine))
attempt("alter_configs", lambda: alter(mine, {"retention.ms": "7000"}))
attempt("describe_configs_after", lambda: configs(mine))
attempt("create_partitions", lambda: errors(admin.create_partitions({mine: NewPartitions(3)})))

attempt("create_forbidden", lambda: errors(admin.create_topics(
    [NewTopic(forbidden, num_partitions=1, replication_factor=1)])))
attempt("describe_configs_forbidden", lambda: configs(forbidden)["error"])
attempt("alter_configs_hidden", lambda: alter(hidden, {"retention.ms": "1"}))
attempt("delete_hidden", lambda: errors(admin.delete_topics([hidden]), "topic_error_codes"))

attempt("delete", lambda: errors(admin.delete_topics([mine]), "topic_error_codes"))
attempt("visible_after", lambda: settled(lambda: sorted(admin.list_topics()), []))
admin.close()
print(json.dumps(out, sort_keys=True))
