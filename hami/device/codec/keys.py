"""Annotation keys of every HAMi wire format, and the unset container-device index."""

REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
PAIR_SCORE_ANNOTATION = "hami.io/node-nvidia-score"
HANDSHAKE_ANNOTATION = "hami.io/node-handshake"
NODE_LOCK_ANNOTATION = "hami.io/mutex.lock"
CORDON_ANNOTATION = "hami.io/device-cordon"
TO_ALLOCATE_ANNOTATION = "hami.io/vgpu-devices-to-allocate"
ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"
MIG_ALLOCATIONS_ANNOTATION = "hami.io/vgpu-mig-allocations"
VGPU_NODE_ANNOTATION = "hami.io/vgpu-node"
VGPU_TIME_ANNOTATION = "hami.io/vgpu-time"
BIND_PHASE_ANNOTATION = "hami.io/bind-phase"
BIND_TIME_ANNOTATION = "hami.io/bind-time"
NODE_SCHEDULER_POLICY_ANNOTATION = "hami.io/node-scheduler-policy"
GPU_SCHEDULER_POLICY_ANNOTATION = "hami.io/gpu-scheduler-policy"
SCORING_WEIGHTS_ANNOTATION = "hami.io/device-scoring-weights"
USE_GPUTYPE_ANNOTATION = "nvidia.com/use-gputype"
NOUSE_GPUTYPE_ANNOTATION = "nvidia.com/nouse-gputype"
USE_GPUUUID_ANNOTATION = "nvidia.com/use-gpuuuid"
NOUSE_GPUUUID_ANNOTATION = "nvidia.com/nouse-gpuuuid"
NUMA_BIND_ANNOTATION = "nvidia.com/numa-bind"
VGPU_MODE_ANNOTATION = "nvidia.com/vgpu-mode"

# hami's own informational keys (not HAMi wire formats): what readers of snapshots must know as ours.
HAMI_CORE_ANNOTATION = "hami.io/hami-core"  # node: HAMi-core version the agent installed (hami.agent.hamicore)
REQUEUE_AT_ANNOTATION = "hami.io/requeue-at"  # pod: the waker's nudge (hami.scheduler.cache.waker)
EMBEDDED_ANNOTATION = "hami.io/embedded"  # the embedded cluster's own objects (hami.sim.cluster)
# pod: the webhook's nonce on every pod CREATE it allows (hami.scheduler.admission.admitted)
ADMITTED_ANNOTATION = "hami.io/admitted"
DRA_CLAIMS_ANNOTATION = "hami.io/dra-claims"  # pod, --dra: its claims' shapes (hami.dra.claims)
# node label: which path hands out the node's GPUs, `device-plugin` or `dra`, never both (hami.kube.nodemode)
GPU_MODE_LABEL = "hami.io/gpu-mode"
HAMI_INFO_ANNOTATIONS = frozenset({HAMI_CORE_ANNOTATION, REQUEUE_AT_ANNOTATION, EMBEDDED_ANNOTATION,
                                   ADMITTED_ANNOTATION, DRA_CLAIMS_ANNOTATION})

# Index a decoded ContainerDevice carries: the card index is not on the wire (HAMi's
# UnsetContainerDeviceIdx), and a real index is >= 0, so reading it by mistake is obvious.
UNSET_CONTAINER_DEVICE_IDX = -1
