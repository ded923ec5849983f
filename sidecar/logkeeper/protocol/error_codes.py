"""Kafka's error codes that the listener answers with, and the storage errors they stand for.

    code  name                          answered for
    -1    UNKNOWN_SERVER_ERROR          an unexpected failure (a bug: logged with its traceback)
     1    OFFSET_OUT_OF_RANGE           a fetch outside [log start offset, log end offset]
     2    CORRUPT_MESSAGE               batch bytes that fail the CRC or do not parse
     3    UNKNOWN_TOPIC_OR_PARTITION    a topic or partition the sidecar does not have
    10    MESSAGE_TOO_LARGE             a batch over max.message.bytes or a request over segment.bytes
     6    NOT_LEADER_OR_FOLLOWER        the sidecar is shutting down (retriable: the client retries)
    15    COORDINATOR_NOT_AVAILABLE     a transaction coordinator was asked for (none here)
    22    ILLEGAL_GENERATION            a group request of an old generation
    23    INCONSISTENT_GROUP_PROTOCOL   a member without a protocol the group shares
    24    INVALID_GROUP_ID              an empty group id
    25    UNKNOWN_MEMBER_ID             a member the group does not know
    26    INVALID_SESSION_TIMEOUT       outside [group.min.session.timeout.ms, group.max.session.timeout.ms]
    27    REBALANCE_IN_PROGRESS         heartbeats and commits while the group rebalances
    12    OFFSET_METADATA_TOO_LARGE     commit metadata over 4096 bytes
    32    INVALID_TIMESTAMP             a record timestamp outside the topic's window
    35    UNSUPPORTED_VERSION           a version the listener does not serve
    36    TOPIC_ALREADY_EXISTS          CreateTopics of an existing topic
    37    INVALID_PARTITIONS            a partition count out of [1, 1024]
    38    INVALID_REPLICATION_FACTOR    a replication factor other than 1 or -1 (one node)
    39    INVALID_REPLICA_ASSIGNMENT    manual assignments naming another node
    40    INVALID_CONFIG                an unknown topic config key or a bad value
    42    INVALID_REQUEST               what this node cannot do (transactions, unknown resource types)
    17    INVALID_TOPIC_EXCEPTION       a bad topic name; deleting an internal topic; a client's produce
                                        to an internal topic (__consumer_offsets, __transaction_state)
    33    UNSUPPORTED_SASL_MECHANISM    a SaslHandshake naming a mechanism not enabled
    34    ILLEGAL_SASL_STATE            SASL requests on a listener without SASL, or once authenticated
    58    SASL_AUTHENTICATION_FAILED    a wrong name or password (the connection is then closed)
    45    OUT_OF_ORDER_SEQUENCE_NUMBER  an idempotent producer's sequence gap
    47    INVALID_PRODUCER_EPOCH        an idempotent producer's old epoch
    56    KAFKA_STORAGE_ERROR           the partition's log directory is offline
    79    MEMBER_ID_REQUIRED            a first JoinGroup (v4+): rejoin with the member id given
    87    INVALID_RECORD                records that break a rule (offset deltas, keys on compacted topics)
"""

from __future__ import annotations

from ..errors import (
    CorruptRecordError,
    InvalidConfigError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    UnknownPartitionError,
)
from ..server.errors import BadRequestError, NotReadyError, TopicExistsError, TopicNotFoundError

NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
MESSAGE_TOO_LARGE = 10
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_NOT_AVAILABLE = 15
INVALID_TOPIC_EXCEPTION = 17
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
INVALID_TIMESTAMP = 32
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
INVALID_REQUEST = 42
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
KAFKA_STORAGE_ERROR = 56
SASL_AUTHENTICATION_FAILED = 58
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
INVALID_RECORD = 87


def code_of(err: BaseException) -> int:
    """The error code a storage or service exception is answered with."""
    # the most specific first: InvalidRecordError is a CorruptRecordError
    if isinstance(err, InvalidRecordError):
        return INVALID_RECORD
    if isinstance(err, CorruptRecordError):
        return CORRUPT_MESSAGE
    table: tuple[tuple[type[BaseException], int], ...] = (
        (UnknownPartitionError, UNKNOWN_TOPIC_OR_PARTITION),
        (TopicNotFoundError, UNKNOWN_TOPIC_OR_PARTITION),
        (OffsetOutOfRangeError, OFFSET_OUT_OF_RANGE),
        (RecordTooLargeError, MESSAGE_TOO_LARGE),
        (InvalidTimestampError, INVALID_TIMESTAMP),
        (OutOfOrderSequenceError, OUT_OF_ORDER_SEQUENCE_NUMBER),
        (InvalidProducerEpochError, INVALID_PRODUCER_EPOCH),
        (KafkaStorageError, KAFKA_STORAGE_ERROR),
        (NotReadyError, NOT_LEADER_OR_FOLLOWER),
        (TopicExistsError, TOPIC_ALREADY_EXISTS),
        (InvalidConfigError, INVALID_CONFIG),
        (BadRequestError, INVALID_REQUEST),
    )
    for cls, code in table:
        if isinstance(err, cls):
            return code
    return UNKNOWN_SERVER_ERROR
