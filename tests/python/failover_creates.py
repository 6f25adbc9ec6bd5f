"""Creates topics PREFIX0 .. PREFIX{N-1}, one request at a time, through a
Keel broker's Kafka listener with confluent_kafka's AdminClient, while the
test kills the active controller. Usage: failover_creates.py BOOTSTRAP PREFIX N

Security settings (librdkafka properties) come as one JSON object in
$KEEL_KAFKA_CONFIG.

Each create is sent once by this script (librdkafka may retry inside);
prints one JSON list of [topic, null | "ERROR_NAME(code)"]."""

import json
import os
import sys
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
conf = {"bootstrap.servers": bootstrap}
conf.update(json.loads(os.environ.get("KEEL_KAFKA_CONFIG", "{}")))
admin = AdminClient(conf)
out = []
for i in range(n):
    name = f"{prefix}{i}"
    f = admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=2)],
                            request_timeout=20, operation_timeout=0)[name]
    try:
        f.result(timeout=60)
        out.append([name, None])
    except KafkaException as e:
        out.append([name, f"{e.args[0].name()}({e.args[0].code()})"])
    time.sleep(0.02)
print(json.dumps(out))
