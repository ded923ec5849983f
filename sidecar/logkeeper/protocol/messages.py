"""The request and response schemas of the APIs the listener serves (format: schema.py).

Field lists, versions, nullability, tags and defaults follow Kafka's message definitions
(clients/src/main/resources/common/message/*.json); names are written in snake_case. ``APIS``
maps each API key to its schemas and the version range the listener advertises in ApiVersions
(``supported``); the schemas may cover more versions (``schema_max``) so that an unsupported one
can still be answered with UNSUPPORTED_VERSION where Kafka does so. The group coordinator's
schemas are group_messages.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

from .group_messages import (
    DESCRIBE_GROUPS_REQUEST,
    DESCRIBE_GROUPS_RESPONSE,
    FIND_COORDINATOR_REQUEST,
    FIND_COORDINATOR_RESPONSE,
    HEARTBEAT_REQUEST,
    HEARTBEAT_RESPONSE,
    JOIN_GROUP_REQUEST,
    JOIN_GROUP_RESPONSE,
    LEAVE_GROUP_REQUEST,
    LEAVE_GROUP_RESPONSE,
    LIST_GROUPS_REQUEST,
    LIST_GROUPS_RESPONSE,
    OFFSET_COMMIT_REQUEST,
    OFFSET_COMMIT_RESPONSE,
    OFFSET_FETCH_REQUEST,
    OFFSET_FETCH_RESPONSE,
    SYNC_GROUP_REQUEST,
    SYNC_GROUP_RESPONSE,
)
from .schema import Message, parse_message

API_VERSIONS_REQUEST = parse_message("""
ApiVersionsRequest flex=3+
  client_software_name string 3+
  client_software_version string 3+
""")
API_VERSIONS_RESPONSE = parse_message("""
ApiVersionsResponse flex=3+
  error_code int16
  api_keys []
    api_key int16
    min_version int16
    max_version int16
  throttle_time_ms int32 1+
  supported_features [] 3+ tag=0
    name string
    min_version int16
    max_version int16
  finalized_features_epoch int64 3+ tag=1 default=-1
  finalized_features [] 3+ tag=2
    name string
    max_version_level int16
    min_version_level int16
""")

METADATA_REQUEST = parse_message("""
MetadataRequest flex=9+
  topics [] null=1+
    topic_id uuid 10+
    name string null=10+
  allow_auto_topic_creation bool 4+ default=true
  include_cluster_authorized_operations bool 8-10
  include_topic_authorized_operations bool 8+
""")
METADATA_RESPONSE = parse_message("""
MetadataResponse flex=9+
  throttle_time_ms int32 3+
  brokers []
    node_id int32
    host string
    port int32
    rack string 1+ null default=null
  cluster_id string 2+ null default=null
  controller_id int32 1+ default=-1
  topics []
    error_code int16
    name string null=12+
    topic_id uuid 10+
    is_internal bool 1+
    partitions []
      error_code int16
      partition_index int32
      leader_id int32
      leader_epoch int32 7+ default=-1
      replica_nodes []int32
      isr_nodes []int32
      offline_replicas []int32 5+
    topic_authorized_operations int32 8+ default=-2147483648
  cluster_authorized_operations int32 8-10 default=-2147483648
""")

PRODUCE_REQUEST = parse_message("""
ProduceRequest flex=9+
  transactional_id string 3+ null default=null
  acks int16
  timeout_ms int32
  topic_data []
    name string
    partition_data []
      index int32
      records records null
""")
PRODUCE_RESPONSE = parse_message("""
ProduceResponse flex=9+
  responses []
    name string
    partition_responses []
      index int32
      error_code int16
      base_offset int64
      log_append_time_ms int64 2+ default=-1
      log_start_offset int64 5+ default=-1
      record_errors [] 8+
        batch_index int32
        batch_index_error_message string null default=null
      error_message string 8+ null default=null
  throttle_time_ms int32 1+
""")

FETCH_REQUEST = parse_message("""
FetchRequest flex=12+
  cluster_id string 12+ null tag=0 default=null
  replica_id int32 0-14 default=-1
  max_wait_ms int32
  min_bytes int32
  max_bytes int32 3+ default=0x7fffffff
  isolation_level int8 4+
  session_id int32 7+
  session_epoch int32 7+ default=-1
  topics []
    topic string 0-12
    topic_id uuid 13+
    partitions []
      partition int32
      current_leader_epoch int32 9+ default=-1
      fetch_offset int64
      last_fetched_epoch int32 12+ default=-1
      log_start_offset int64 5+ default=-1
      partition_max_bytes int32
  forgotten_topics_data [] 7+
    topic string 7-12
    topic_id uuid 13+
    partitions []int32
  rack_id string 11+
""")
FETCH_RESPONSE = parse_message("""
FetchResponse flex=12+
  throttle_time_ms int32 1+
  error_code int16 7+
  session_id int32 7+
  responses []
    topic string 0-12
    topic_id uuid 13+
    partitions []
      partition_index int32
      error_code int16
      high_watermark int64
      last_stable_offset int64 4+ default=-1
      log_start_offset int64 5+ default=-1
      aborted_transactions [] 4+ null
        producer_id int64
        first_offset int64
      preferred_read_replica int32 11+ default=-1
      records records null
""")

LIST_OFFSETS_REQUEST = parse_message("""
ListOffsetsRequest flex=6+
  replica_id int32
  isolation_level int8 2+
  topics []
    name string
    partitions []
      partition_index int32
      current_leader_epoch int32 4+ default=-1
      timestamp int64
      max_num_offsets int32 0 default=1
  timeout_ms int32 10+
""")
LIST_OFFSETS_RESPONSE = parse_message("""
ListOffsetsResponse flex=6+
  throttle_time_ms int32 2+
  topics []
    name string
    partitions []
      partition_index int32
      error_code int16
      old_style_offsets []int64 0
      timestamp int64 1+ default=-1
      offset int64 1+ default=-1
      leader_epoch int32 4+ default=-1
""")

CREATE_TOPICS_REQUEST = parse_message("""
CreateTopicsRequest flex=5+
  topics []
    name string
    num_partitions int32
    replication_factor int16
    assignments []
      partition_index int32
      broker_ids []int32
    configs []
      name string
      value string null
  timeout_ms int32 default=60000
  validate_only bool 1+
""")
CREATE_TOPICS_RESPONSE = parse_message("""
CreateTopicsResponse flex=5+
  throttle_time_ms int32 2+
  topics []
    name string
    topic_id uuid 7+
    error_code int16
    error_message string 1+ null default=null
    topic_config_error_code int16 5+ tag=0
    num_partitions int32 5+ default=-1
    replication_factor int16 5+ default=-1
    configs [] 5+ null
      name string
      value string null
      read_only bool
      config_source int8 default=-1
      is_sensitive bool
""")

DELETE_TOPICS_REQUEST = parse_message("""
DeleteTopicsRequest flex=4+
  topics [] 6+
    name string null default=null
    topic_id uuid
  topic_names []string 0-5
  timeout_ms int32
""")
DELETE_TOPICS_RESPONSE = parse_message("""
DeleteTopicsResponse flex=4+
  throttle_time_ms int32 1+
  responses []
    name string null=6+
    topic_id uuid 6+
    error_code int16
    error_message string 5+ null default=null
""")

DESCRIBE_CONFIGS_REQUEST = parse_message("""
DescribeConfigsRequest flex=4+
  resources []
    resource_type int8
    resource_name string
    configuration_keys []string null
  include_synonyms bool 1+
  include_documentation bool 3+
""")
DESCRIBE_CONFIGS_RESPONSE = parse_message("""
DescribeConfigsResponse flex=4+
  throttle_time_ms int32
  results []
    error_code int16
    error_message string null default=null
    resource_type int8
    resource_name string
    configs []
      name string
      value string null
      read_only bool
      is_default bool 0
      config_source int8 1+ default=-1
      is_sensitive bool
      synonyms [] 1+
        name string
        value string null
        source int8
      config_type int8 3+
      documentation string 3+ null default=null
""")

INCREMENTAL_ALTER_CONFIGS_REQUEST = parse_message("""
IncrementalAlterConfigsRequest flex=1+
  resources []
    resource_type int8
    resource_name string
    configs []
      name string
      config_operation int8
      value string null
  validate_only bool
""")
INCREMENTAL_ALTER_CONFIGS_RESPONSE = parse_message("""
IncrementalAlterConfigsResponse flex=1+
  throttle_time_ms int32
  responses []
    error_code int16
    error_message string null default=null
    resource_type int8
    resource_name string
""")

INIT_PRODUCER_ID_REQUEST = parse_message("""
InitProducerIdRequest flex=2+
  transactional_id string null
  transaction_timeout_ms int32
  producer_id int64 3+ default=-1
  producer_epoch int16 3+ default=-1
""")
INIT_PRODUCER_ID_RESPONSE = parse_message("""
InitProducerIdResponse flex=2+
  throttle_time_ms int32
  error_code int16
  producer_id int64 default=-1
  producer_epoch int16
""")

# SASL (the listener's security protocols SASL_PLAINTEXT and SASL_SSL): a handshake names the
# mechanism, then its tokens travel in SaslAuthenticate requests (handshake v1; v0's unframed
# tokens are not served, as no current client needs them).
SASL_HANDSHAKE_REQUEST = parse_message("""
SaslHandshakeRequest flex=none
  mechanism string
""")
SASL_HANDSHAKE_RESPONSE = parse_message("""
SaslHandshakeResponse flex=none
  error_code int16
  mechanisms []string
""")
SASL_AUTHENTICATE_REQUEST = parse_message("""
SaslAuthenticateRequest flex=2+
  auth_bytes bytes
""")
SASL_AUTHENTICATE_RESPONSE = parse_message("""
SaslAuthenticateResponse flex=2+
  error_code int16
  error_message string null
  auth_bytes bytes
  session_lifetime_ms int64 1+
""")

@dataclass(frozen=True)
class ApiSpec:
    key: int
    name: str
    request: Message
    response: Message
    min_version: int  # advertised (ApiVersions) ...
    max_version: int  # ... range
    schema_min: int  # versions the schemas can decode; an advertised-range miss inside it is
    schema_max: int  # answered with UNSUPPORTED_VERSION by the handler

    def request_header_version(self, version: int) -> int:
        return 2 if self.request.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        if self.key == API_VERSIONS:
            return 0  # ApiVersions answers with header v0 always, so any client can read it
        return 1 if self.response.is_flexible(version) else 0


PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 10, 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID = 15, 16, 18, 19, 20, 22
DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36

APIS: dict[int, ApiSpec] = {s.key: s for s in (
    ApiSpec(PRODUCE, "Produce", PRODUCE_REQUEST, PRODUCE_RESPONSE, 3, 11, 0, 11),
    ApiSpec(FETCH, "Fetch", FETCH_REQUEST, FETCH_RESPONSE, 4, 12, 0, 12),
    ApiSpec(LIST_OFFSETS, "ListOffsets", LIST_OFFSETS_REQUEST, LIST_OFFSETS_RESPONSE, 0, 8, 0, 8),
    ApiSpec(METADATA, "Metadata", METADATA_REQUEST, METADATA_RESPONSE, 0, 12, 0, 12),
    ApiSpec(OFFSET_COMMIT, "OffsetCommit", OFFSET_COMMIT_REQUEST, OFFSET_COMMIT_RESPONSE, 0, 8, 0, 8),
    ApiSpec(OFFSET_FETCH, "OffsetFetch", OFFSET_FETCH_REQUEST, OFFSET_FETCH_RESPONSE, 0, 8, 0, 8),
    ApiSpec(FIND_COORDINATOR, "FindCoordinator", FIND_COORDINATOR_REQUEST, FIND_COORDINATOR_RESPONSE, 0, 4, 0, 4),
    ApiSpec(JOIN_GROUP, "JoinGroup", JOIN_GROUP_REQUEST, JOIN_GROUP_RESPONSE, 0, 9, 0, 9),
    ApiSpec(HEARTBEAT, "Heartbeat", HEARTBEAT_REQUEST, HEARTBEAT_RESPONSE, 0, 4, 0, 4),
    ApiSpec(LEAVE_GROUP, "LeaveGroup", LEAVE_GROUP_REQUEST, LEAVE_GROUP_RESPONSE, 0, 5, 0, 5),
    ApiSpec(SYNC_GROUP, "SyncGroup", SYNC_GROUP_REQUEST, SYNC_GROUP_RESPONSE, 0, 5, 0, 5),
    ApiSpec(DESCRIBE_GROUPS, "DescribeGroups", DESCRIBE_GROUPS_REQUEST, DESCRIBE_GROUPS_RESPONSE, 0, 5, 0, 5),
    ApiSpec(LIST_GROUPS, "ListGroups", LIST_GROUPS_REQUEST, LIST_GROUPS_RESPONSE, 0, 5, 0, 5),
    ApiSpec(API_VERSIONS, "ApiVersions", API_VERSIONS_REQUEST, API_VERSIONS_RESPONSE, 0, 4, 0, 4),
    ApiSpec(CREATE_TOPICS, "CreateTopics", CREATE_TOPICS_REQUEST, CREATE_TOPICS_RESPONSE, 0, 7, 0, 7),
    ApiSpec(DELETE_TOPICS, "DeleteTopics", DELETE_TOPICS_REQUEST, DELETE_TOPICS_RESPONSE, 0, 6, 0, 6),
    ApiSpec(INIT_PRODUCER_ID, "InitProducerId", INIT_PRODUCER_ID_REQUEST, INIT_PRODUCER_ID_RESPONSE, 0, 4, 0, 4),
    ApiSpec(DESCRIBE_CONFIGS, "DescribeConfigs", DESCRIBE_CONFIGS_REQUEST, DESCRIBE_CONFIGS_RESPONSE, 0, 4, 0, 4),
    ApiSpec(INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs", INCREMENTAL_ALTER_CONFIGS_REQUEST,
            INCREMENTAL_ALTER_CONFIGS_RESPONSE, 0, 1, 0, 1),
    ApiSpec(SASL_HANDSHAKE, "SaslHandshake", SASL_HANDSHAKE_REQUEST, SASL_HANDSHAKE_RESPONSE, 1, 1, 0, 1),
    ApiSpec(SASL_AUTHENTICATE, "SaslAuthenticate", SASL_AUTHENTICATE_REQUEST, SASL_AUTHENTICATE_RESPONSE, 0, 2, 0, 2),
)}
