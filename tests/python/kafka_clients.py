"""What the admin-client scripts in this folder share: an admin client of
either library built from $KEEL_KAFKA_CONFIG, how each reports an error,
and waiting until brokers have caught up with the controller.

Each library is imported only by the functions that use it, so a script
of one library does not need the other."""

import json
import os
import time


def kafka_config():
    """The security settings in $KEEL_KAFKA_CONFIG (a JSON object)."""
    return json.loads(os.environ.get("KEEL_KAFKA_CONFIG", "{}"))


def settled(f, want, tries=100):
    """f() once it returns `want` (brokers learn of a change a moment
    after the controller answered it), else its last answer."""
    got = f()
    for _ in range(tries):
        if got == want:
            break
        time.sleep(0.1)
        got = f()
    return got


def confluent_admin(bootstrap):
    """confluent_kafka's AdminClient on `bootstrap`, with the settings in
    $KEEL_KAFKA_CONFIG over a 20 s socket timeout."""
    from confluent_kafka.admin import AdminClient

    conf = {"bootstrap.servers": bootstrap, "socket.timeout.ms": 20000}
    conf.update(kafka_config())
    return AdminClient(conf)


def name(err):
    """librdkafka's name of a Kafka error and its code: TOPIC_EXCEPTION(17)."""
    return f"{err.name()}({err.code()})"


def error_of(future):
    """None once a confluent_kafka future succeeds (within 30 s), else its
    Kafka error as NAME(code)."""
    from confluent_kafka import KafkaException

    try:
        future.result(timeout=30)
        return None
    except KafkaException as e:
        return name(e.args[0])


def kafka_python_admin(bootstrap):
    """kafka-python's KafkaAdminClient on `bootstrap` (30 s requests), with
    the keyword arguments in $KEEL_KAFKA_CONFIG."""
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="keel-test",
                            request_timeout_ms=30000, **kafka_config())


def attempt(out, step, f):
    """out[step] = f(), or the class name of the kafka-python error it
    raised."""
    from kafka.errors import KafkaError

    try:
        out[step] = f()
    except KafkaError as e:
        out[step] = type(e).__name__


def errors(resp, field="topic_errors"):
    """{name: error code} of a CreateTopics/DeleteTopics response."""
    return {t[0]: t[1] for t in getattr(resp, field)}
