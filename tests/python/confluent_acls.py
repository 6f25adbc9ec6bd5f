"""confluent_kafka's AdminClient (librdkafka) as a user whose ACLs grant
topics under one prefix only. Usage:
confluent_acls.py BOOTSTRAP PREFIX FORBIDDEN HIDDEN

Creates, describes, alters and deletes PREFIX + "t"; tries FORBIDDEN (a
topic name the user is granted nothing on; it does not exist) and HIDDEN
(an existing topic the user may not even see). Security settings
(librdkafka properties) come as one JSON object in $KEEL_KAFKA_CONFIG.
Prints one JSON object: each step's error as NAME(code) (null on success)
or what was read back. Asserted on by tests/kafka_admin.rs."""

import json
import sys

from confluent_kafka import KafkaException
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewPartitions, NewTopic)

from kafka_clients import confluent_admin, error_of, name, settled

bootstrap, prefix, forbidden, hidden = sys.argv[1:5]
admin = confluent_admin(bootstrap)
out = {}


def visible():
    """Every topic an all-topics Metadata request shows."""
    return sorted(admin.list_topics(timeout=20).topics)


def by_name(topic):
    """The error of a Metadata request naming `topic` (null: none)."""
    t = admin.list_topics(topic=topic, timeout=20).topics.get(topic)
    return "absent" if t is None else (name(t.error) if t.error else None)


def partitions_of(topic):
    t = admin.list_topics(timeout=20).topics.get(topic)
    return None if t is None or t.error is not None else len(t.partitions)


def create(topic, **kw):
    return error_of(admin.create_topics([NewTopic(topic, **kw)], request_timeout=30)[topic])


def retention(topic):
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        return admin.describe_configs([res], request_timeout=30)[res].result(timeout=30)[
            "retention.ms"].value
    except KafkaException as e:
        return name(e.args[0])


def set_retention(topic, value):
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", value, incremental_operation=AlterConfigOpType.SET)])
    return error_of(admin.incremental_alter_configs([res])[res])


def delete(topic):
    return error_of(admin.delete_topics([topic], request_timeout=30)[topic])


mine = prefix + "t"
out["create"] = create(mine, num_partitions=3, replication_factor=2,
                       config={"retention.ms": "1000"})
out["visible"] = settled(visible, [mine])
out["hidden_by_name"] = by_name(hidden)
out["describe_configs"] = retention(mine)
out["alter_configs"] = set_retention(mine, "2000")
out["configs_after_alter"] = retention(mine)
fs = admin.create_partitions([NewPartitions(mine, 4)], request_timeout=30)
out["create_partitions"] = error_of(fs[mine])
out["partitions_after"] = settled(lambda: partitions_of(mine), 4)

out["create_forbidden"] = create(forbidden, num_partitions=1, replication_factor=1)
out["describe_configs_forbidden"] = retention(forbidden)
out["describe_configs_hidden"] = retention(hidden)
out["alter_configs_hidden"] = set_retention(hidden, "1")
fs = admin.create_partitions([NewPartitions(hidden, 5)], request_timeout=30)
out["create_partitions_hidden"] = error_of(fs[hidden])
out["delete_hidden"] = delete(hidden)
out["delete_forbidden"] = delete(forbidden)

out["delete"] = delete(mine)
out["visible_after"] = settled(visible, [])
print(json.dumps(out, sort_keys=True))
