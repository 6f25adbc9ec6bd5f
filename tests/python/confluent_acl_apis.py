"""confluent_kafka's AdminClient (librdkafka) managing ACLs and SCRAM
credentials through a broker's Kafka listener. Usage:
confluent_acl_apis.py BOOTSTRAP PREFIX USER

Creates an ALLOW CREATE binding for User:USER on topics prefixed PREFIX
(and a READ one, which Keel refuses), describes and deletes it; upserts a
SCRAM-SHA-512 credential for USER and describes it. Security settings
(librdkafka properties) come as one JSON object in $KEEL_KAFKA_CONFIG.
Prints one JSON object: each step's error as NAME(code) (null on success)
or what was read back. Asserted on by tests/kafka_acl_apis.rs."""

import json
import os
import sys

from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                   AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType,
                                   ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

bootstrap, prefix, user = sys.argv[1:4]
conf = {"bootstrap.servers": bootstrap, "socket.timeout.ms": 20000}
conf.update(json.loads(os.environ.get("KEEL_KAFKA_CONFIG", "{}")))
admin = AdminClient(conf)
out = {}
principal = f"User:{user}"


def name(err):
    return f"{err.name()}({err.code()})"


def result(future):
    """(value, None) or (None, the error as NAME(code))."""
    try:
        return future.result(timeout=30), None
    except KafkaException as e:
        return None, name(e.args[0])


def show(bindings):
    return sorted([b.restype.name, b.name, b.resource_pattern_type.name, b.principal,
                   b.host, b.operation.name, b.permission_type.name] for b in bindings)


def binding(operation):
    return AclBinding(ResourceType.TOPIC, prefix, ResourcePatternType.PREFIXED, principal,
                      "*", operation, AclPermissionType.ALLOW)


mine = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None,
                        AclOperation.ANY, AclPermissionType.ANY)

create, read = binding(AclOperation.CREATE), binding(AclOperation.READ)
futures = admin.create_acls([create, read], request_timeout=30)
out["create"] = result(futures[create])[1]
out["create_read"] = result(futures[read])[1]

found, out["describe_error"] = result(admin.describe_acls(mine, request_timeout=30))
out["described"] = show(found or [])

# MATCH with a topic name the prefix covers.
match = AclBindingFilter(ResourceType.TOPIC, prefix + "x", ResourcePatternType.MATCH, None, None,
                         AclOperation.ANY, AclPermissionType.ANY)
found, _ = result(admin.describe_acls(match, request_timeout=30))
out["described_match"] = show(b for b in (found or []) if b.principal == principal)

removed, out["delete_error"] = result(admin.delete_acls([mine], request_timeout=30)[mine])
out["deleted"] = show(removed or [])
found, _ = result(admin.describe_acls(mine, request_timeout=30))
out["described_after_delete"] = show(found or [])

upsertion = UserScramCredentialUpsertion(
    user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"a-password")
out["alter_scram"] = result(admin.alter_user_scram_credentials([upsertion],
                                                               request_timeout=30)[user])[1]
description, out["describe_scram_error"] = result(
    admin.describe_user_scram_credentials([user], request_timeout=30)[user])
out["described_scram"] = None if description is None else [
    [i.mechanism.name, i.iterations] for i in description.scram_credential_infos]

print(json.dumps(out))
