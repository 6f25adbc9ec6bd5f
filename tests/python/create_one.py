"""One CreateTopics through a Keel broker's Kafka listener with
confluent_kafka's AdminClient. Usage: create_one.py BOOTSTRAP TOPIC

Prints one JSON object: {"error": the Kafka error librdkafka reports as
NAME(code), or null on success}. The Rust test asserts on it."""

import json
import sys

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap, topic = sys.argv[1], sys.argv[2]
admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 20000})
fs = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)],
                         request_timeout=30)
try:
    fs[topic].result(timeout=60)
    error = None
except KafkaException as e:
    err = e.args[0]
    error = f"{err.name()}({err.code()})"
print(json.dumps({"error": error}))
