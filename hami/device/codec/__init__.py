"""Every HAMi wire format, encoded and decoded. Pure: no I/O, never logs.

One error type, `CodecError`, carries the field, the offending text and its position; on any
input whatsoever a decoder returns a value or raises `CodecError`, nothing else. Where HAMi's
Go code has an error message, `str(CodecError)` is that message, so a reader can grep HAMi.

Formats (annotation keys are the constants of `keys`; see ../shared/spec/scheduler.md §1-§2):

* `hami.io/node-nvidia-register`: JSON array written exactly as Go `encoding/json` writes
  `[]DeviceInfo` (key order of the struct, every field `omitempty`, no spaces, HTML-escaped
  strings); the legacy `id,count,devmem,devcore,type,numa,health[,index,mode]:` form is still
  decoded. `decode_node_devices` detects which one it was given.
* `hami.io/node-nvidia-score`: JSON `[{"uuid":..,"score":{uuid:int}}]`.
* pod device strings (`hami.io/vgpu-devices-to-allocate` / `-allocated`):
  `UUID,TYPE,MEM,CORES:` per device, `;` after every container; decoding keeps empty containers
  (a trailing `;` yields one extra empty container, as HAMi does).
* `hami.io/node-handshake`: `Requesting_<2006-01-02 15:04:05>`, legacy `Reported <Go time>`,
  `Deleted_<2006-01-02 15:04:05>`.
* `hami.io/mutex.lock`: `<RFC3339>,<namespace>,<pod>`, legacy bare RFC3339.
* `hami.io/device-cordon`, `hami.io/device-scoring-weights`, `hami.io/vgpu-mig-allocations`.

Layout: one module per wire format, this package re-exports what callers use, so
`from hami.device import codec; codec.decode_node_devices(...)` stays the way to call it.

* `keys`: the annotation keys.  `errors`: `CodecError`.
* `golang`: Go semantics every format leans on (strconv, TrimSpace, Quote, encoding/json).
* `register`: `hami.io/node-nvidia-register` (JSON and legacy) and `RegisterDecoder`.
* `pairscore`, `poddevices`, `cordon`, `weights`: one annotation each.
* `timestamps`: handshake, node lock and unix-seconds values.  `mig`: MIG profiles and allocations.

A vendor whose wire format differs from NVIDIA's gets its own module here; pod filter predicates
(use/nouse lists, numa-bind, vgpu-mode) are the scheduler's (`hami.scheduler.placement.podfilter`).
"""

from hami.device.codec.cordon import (
    decode_device_cordon,
    encode_device_cordon,
)
from hami.device.codec.errors import (
    CodecError,
)
from hami.device.codec.golang import (
    go_json_string,
    go_quote,
    go_to_upper,
    go_trim_space,
    parse_go_bool,
)
from hami.device.codec.keys import (
    ALLOCATED_ANNOTATION,
    BIND_PHASE_ANNOTATION,
    BIND_TIME_ANNOTATION,
    CORDON_ANNOTATION,
    GPU_MODE_LABEL,
    GPU_SCHEDULER_POLICY_ANNOTATION,
    HANDSHAKE_ANNOTATION,
    MIG_ALLOCATIONS_ANNOTATION,
    NODE_LOCK_ANNOTATION,
    NODE_SCHEDULER_POLICY_ANNOTATION,
    NOUSE_GPUTYPE_ANNOTATION,
    NOUSE_GPUUUID_ANNOTATION,
    NUMA_BIND_ANNOTATION,
    PAIR_SCORE_ANNOTATION,
    REGISTER_ANNOTATION,
    SCORING_WEIGHTS_ANNOTATION,
    TO_ALLOCATE_ANNOTATION,
    UNSET_CONTAINER_DEVICE_IDX,
    USE_GPUTYPE_ANNOTATION,
    USE_GPUUUID_ANNOTATION,
    VGPU_MODE_ANNOTATION,
    VGPU_NODE_ANNOTATION,
    VGPU_TIME_ANNOTATION,
)
from hami.device.codec.mig import (
    MigAllocation,
    decode_mig_allocations,
    encode_mig_allocations,
    encode_mig_profiles,
)
from hami.device.codec.pairscore import (
    DevicePairScore,
    decode_pair_scores,
    encode_pair_scores,
)
from hami.device.codec.poddevices import (
    decode_container_devices,
    decode_pod_devices,
    encode_container_device_type,
    encode_container_devices,
    encode_pod_devices,
    encode_pod_devices_checked,
)
from hami.device.codec.register import (
    RegisterDecoder,
    decode_node_devices,
    decode_node_devices_json,
    decode_node_devices_legacy,
    encode_node_devices,
    encode_node_devices_legacy,
    is_json_register,
)
from hami.device.codec.timestamps import (
    HANDSHAKE_DELETED,
    HANDSHAKE_REPORTED,
    HANDSHAKE_REQUESTING,
    HANDSHAKE_UNKNOWN,
    RFC3339,
    decode_handshake,
    decode_node_lock,
    decode_unix_seconds,
    encode_handshake_deleted,
    encode_handshake_reported,
    encode_handshake_requesting,
    encode_node_lock,
    encode_node_lock_legacy,
    encode_unix_seconds,
    format_datetime,
    format_go_time_string,
    format_micro_time,
    format_rfc3339,
    kube_time,
    node_lock_owner_suffix,
    parse_datetime,
    parse_go_time_string,
    parse_rfc3339,
)
from hami.device.codec.weights import (
    decode_scoring_weights,
    encode_scoring_weights,
)

__all__ = [
    "REGISTER_ANNOTATION",
    "PAIR_SCORE_ANNOTATION",
    "HANDSHAKE_ANNOTATION",
    "NODE_LOCK_ANNOTATION",
    "CORDON_ANNOTATION",
    "TO_ALLOCATE_ANNOTATION",
    "ALLOCATED_ANNOTATION",
    "MIG_ALLOCATIONS_ANNOTATION",
    "VGPU_NODE_ANNOTATION",
    "VGPU_TIME_ANNOTATION",
    "BIND_PHASE_ANNOTATION",
    "BIND_TIME_ANNOTATION",
    "NODE_SCHEDULER_POLICY_ANNOTATION",
    "GPU_MODE_LABEL",
    "GPU_SCHEDULER_POLICY_ANNOTATION",
    "SCORING_WEIGHTS_ANNOTATION",
    "USE_GPUTYPE_ANNOTATION",
    "NOUSE_GPUTYPE_ANNOTATION",
    "USE_GPUUUID_ANNOTATION",
    "NOUSE_GPUUUID_ANNOTATION",
    "NUMA_BIND_ANNOTATION",
    "VGPU_MODE_ANNOTATION",
    "UNSET_CONTAINER_DEVICE_IDX",
    "CodecError",
    "go_to_upper",
    "go_trim_space",
    "go_quote",
    "parse_go_bool",
    "go_json_string",
    "encode_node_devices",
    "encode_node_devices_legacy",
    "decode_node_devices_json",
    "decode_node_devices_legacy",
    "is_json_register",
    "decode_node_devices",
    "RegisterDecoder",
    "DevicePairScore",
    "encode_pair_scores",
    "decode_pair_scores",
    "encode_container_devices",
    "encode_container_device_type",
    "encode_pod_devices",
    "encode_pod_devices_checked",
    "decode_container_devices",
    "decode_pod_devices",
    "HANDSHAKE_REQUESTING",
    "HANDSHAKE_REPORTED",
    "HANDSHAKE_DELETED",
    "HANDSHAKE_UNKNOWN",
    "format_datetime",
    "parse_datetime",
    "encode_handshake_requesting",
    "encode_handshake_deleted",
    "format_go_time_string",
    "encode_handshake_reported",
    "parse_go_time_string",
    "decode_handshake",
    "RFC3339",
    "format_micro_time",
    "format_rfc3339",
    "kube_time",
    "parse_rfc3339",
    "encode_node_lock",
    "encode_node_lock_legacy",
    "decode_node_lock",
    "node_lock_owner_suffix",
    "encode_unix_seconds",
    "decode_unix_seconds",
    "decode_device_cordon",
    "encode_device_cordon",
    "decode_scoring_weights",
    "encode_scoring_weights",
    "encode_mig_profiles",
    "MigAllocation",
    "encode_mig_allocations",
    "decode_mig_allocations",
]
