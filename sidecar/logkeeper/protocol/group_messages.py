"""The group coordinator's schemas (format: schema.py, conventions: messages.py): the requests
and responses of FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, DescribeGroups and ListGroups, and the records of the committed-offsets log
(offsets_store.py). messages.py lists them in ``APIS`` with the other APIs.
"""

from __future__ import annotations

from .schema import parse_message

FIND_COORDINATOR_REQUEST = parse_message("""
FindCoordinatorRequest flex=3+
  key string 0-3
  key_type int8 1+
  coordinator_keys []string 4+
""")
FIND_COORDINATOR_RESPONSE = parse_message("""
FindCoordinatorResponse flex=3+
  throttle_time_ms int32 1+
  error_code int16 0-3
  error_message string 1-3 null default=null
  node_id int32 0-3
  host string 0-3
  port int32 0-3
  coordinators [] 4+
    key string
    node_id int32
    host string
    port int32
    error_code int16
    error_message string null default=null
""")

JOIN_GROUP_REQUEST = parse_message("""
JoinGroupRequest flex=6+
  group_id string
  session_timeout_ms int32
  rebalance_timeout_ms int32 1+ default=-1
  member_id string
  group_instance_id string 5+ null default=null
  protocol_type string
  protocols []
    name string
    metadata bytes
  reason string 8+ null default=null
""")
JOIN_GROUP_RESPONSE = parse_message("""
JoinGroupResponse flex=6+
  throttle_time_ms int32 2+
  error_code int16
  generation_id int32 default=-1
  protocol_type string 7+ null default=null
  protocol_name string null=7+
  leader string
  skip_assignment bool 9+
  member_id string
  members []
    member_id string
    group_instance_id string 5+ null default=null
    metadata bytes
""")

SYNC_GROUP_REQUEST = parse_message("""
SyncGroupRequest flex=4+
  group_id string
  generation_id int32
  member_id string
  group_instance_id string 3+ null default=null
  protocol_type string 5+ null default=null
  protocol_name string 5+ null default=null
  assignments []
    member_id string
    assignment bytes
""")
SYNC_GROUP_RESPONSE = parse_message("""
SyncGroupResponse flex=4+
  throttle_time_ms int32 1+
  error_code int16
  protocol_type string 5+ null default=null
  protocol_name string 5+ null default=null
  assignment bytes
""")

HEARTBEAT_REQUEST = parse_message("""
HeartbeatRequest flex=4+
  group_id string
  generation_id int32
  member_id string
  group_instance_id string 3+ null default=null
""")
HEARTBEAT_RESPONSE = parse_message("""
HeartbeatResponse flex=4+
  throttle_time_ms int32 1+
  error_code int16
""")

LEAVE_GROUP_REQUEST = parse_message("""
LeaveGroupRequest flex=4+
  group_id string
  member_id string 0-2
  members [] 3+
    member_id string
    group_instance_id string null default=null
    reason string 5+ null default=null
""")
LEAVE_GROUP_RESPONSE = parse_message("""
LeaveGroupResponse flex=4+
  throttle_time_ms int32 1+
  error_code int16
  members [] 3+
    member_id string
    group_instance_id string null
    error_code int16
""")

OFFSET_COMMIT_REQUEST = parse_message("""
OffsetCommitRequest flex=8+
  group_id string
  generation_id_or_member_epoch int32 1+ default=-1
  member_id string 1+
  group_instance_id string 7+ null default=null
  retention_time_ms int64 2-4 default=-1
  topics []
    name string
    partitions []
      partition_index int32
      committed_offset int64
      committed_leader_epoch int32 6+ default=-1
      commit_timestamp int64 1 default=-1
      committed_metadata string null
""")
OFFSET_COMMIT_RESPONSE = parse_message("""
OffsetCommitResponse flex=8+
  throttle_time_ms int32 3+
  topics []
    name string
    partitions []
      partition_index int32
      error_code int16
""")

OFFSET_FETCH_REQUEST = parse_message("""
OffsetFetchRequest flex=6+
  group_id string 0-7
  topics [] 0-7 null=2-7
    name string
    partition_indexes []int32
  groups [] 8+
    group_id string
    member_id string 9+ null default=null
    member_epoch int32 9+ default=-1
    topics [] null
      name string
      partition_indexes []int32
  require_stable bool 7+
""")
OFFSET_FETCH_RESPONSE = parse_message("""
OffsetFetchResponse flex=6+
  throttle_time_ms int32 3+
  topics [] 0-7
    name string
    partitions []
      partition_index int32
      committed_offset int64
      committed_leader_epoch int32 5+ default=-1
      metadata string null
      error_code int16
  error_code int16 2-7
  groups [] 8+
    group_id string
    topics []
      name string
      partitions []
        partition_index int32
        committed_offset int64
        committed_leader_epoch int32 default=-1
        metadata string null
        error_code int16
    error_code int16
""")

DESCRIBE_GROUPS_REQUEST = parse_message("""
DescribeGroupsRequest flex=5+
  groups []string
  include_authorized_operations bool 3+
""")
DESCRIBE_GROUPS_RESPONSE = parse_message("""
DescribeGroupsResponse flex=5+
  throttle_time_ms int32 1+
  groups []
    error_code int16
    group_id string
    group_state string
    protocol_type string
    protocol_data string
    members []
      member_id string
      group_instance_id string 4+ null default=null
      client_id string
      client_host string
      member_metadata bytes
      member_assignment bytes
    authorized_operations int32 3+ default=-2147483648
""")

LIST_GROUPS_REQUEST = parse_message("""
ListGroupsRequest flex=3+
  states_filter []string 4+
  types_filter []string 5+
""")
LIST_GROUPS_RESPONSE = parse_message("""
ListGroupsResponse flex=3+
  throttle_time_ms int32 1+
  error_code int16
  groups []
    group_id string
    protocol_type string
    group_state string 4+
    group_type string 5+
""")


# Records of the committed-offsets log (__consumer_offsets), each after an int16 version:
# key version 1 (0 and 1 share the layout), value version 3.
OFFSET_COMMIT_KEY = parse_message("""
OffsetCommitKey flex=none
  group string
  topic string
  partition int32
""")
OFFSET_COMMIT_VALUE = parse_message("""
OffsetCommitValue flex=4+
  offset int64
  leader_epoch int32 3+ default=-1
  metadata string
  commit_timestamp int64
  expire_timestamp int64 1 default=-1
""")
