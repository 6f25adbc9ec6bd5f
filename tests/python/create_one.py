"""One CreateTopics through a Keel broker's Kafka listener with
confluent_kafka's AdminClient. Usage: create_one.py BOOTSTRAP TOPIC [TIMEOUT_S]

Security settings (librdkafka properties) come as one JSON object in
$KEEL_KAFKA_CONFIG; TIMEOUT_S (default 30) bounds the request, waiting
for a connection included.

Prints one JSON object: {"error": the Kafka error librdkafka reports as
NAME(code), or null on success; "client_errors": {NAME(code): text} of
what librdkafka reported on its connections (a refused TLS handshake, a
failed login)}. The Rust test asserts on it."""

import json
import os
import sys

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap, topic = sys.argv[1], sys.argv[2]
timeout_s = float(sys.argv[3]) if len(sys.argv) > 3 else 30.0
client_errors = {}


def on_error(err):
    client_errors.setdefault(f"{err.name()}({err.code()})", err.str())


conf = {"bootstrap.servers": bootstrap, "socket.timeout.ms": 20000, "error_cb": on_error}
conf.update(json.loads(os.environ.get("KEEL_KAFKA_CONFIG", "{}")))
admin = AdminClient(conf)
f = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)],
                        request_timeout=timeout_s)[topic]
# Polled while waiting, so connection errors reach on_error; the request's
# own timeout ends the wait.
while not f.done():
    admin.poll(0.1)
admin.poll(0.1)
try:
    f.result()
    error = None
except KafkaException as e:
    err = e.args[0]
    error = f"{err.name()}({err.code()})"
print(json.dumps({"error": error, "client_errors": client_errors}, sort_keys=True))
