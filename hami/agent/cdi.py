"""How Allocate names the GPUs a container gets: `devicePlugin.deviceListStrategy`. Pure.

Strategies, as NVIDIA's device plugin and HAMi (Project-HAMi/HAMi#1559) spell them:
* `envvar` (default, HAMi v2.10): `NVIDIA_VISIBLE_DEVICES=<uuid,...>`; the NVIDIA runtime hook reads it.
* `cdi-annotations`: a `cdi.k8s.io/hami-device-plugin_<container>` annotation on the container
  listing fully qualified CDI device names; the runtime (containerd/CRI-O with CDI) injects them.
* `cdi-cri`: the `cdi_devices` field of the v1beta1 ContainerAllocateResponse (kubelet passes them
  to the runtime over CRI; Kubernetes 1.28+).
Several may be combined (comma list). Names are the ones the NVIDIA container toolkit generates
(`nvidia-ctk cdi generate`, GPU Operator 25.10+): `nvidia.com/gpu=<uuid>` or `nvidia.com/gpu=<index>`.

Without `envvar`, `NVIDIA_VISIBLE_DEVICES` is set to `void`: CUDA base images carry
`NVIDIA_VISIBLE_DEVICES=all` in their environment, and a runtime still running the legacy hook
would otherwise hand such a container every GPU of the node, next to the CDI devices.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence

from hami.agent.allocate import AllocationError, ContainerAllocation

CDI_KIND = "nvidia.com/gpu"
ANNOTATION_PREFIX = "cdi.k8s.io/"
PLUGIN_NAME = "hami-device-plugin"
VISIBLE = "NVIDIA_VISIBLE_DEVICES"
_NOT_ID = re.compile(r"[^A-Za-z0-9_.-]")


def cdi_name(uuid: str, id_strategy: str, index_of: Callable[[str], int | None]) -> str:
    if id_strategy == "index":
        if uuid.startswith("MIG-"):
            # nvidia-ctk names MIG devices <gpu index>:<MIG device index>; that second index is NVML's
            # handle order, which this agent does not track, so it refuses rather than guess.
            raise AllocationError(f"MIG device {uuid} has no index-style CDI name here "
                                  f"(--device-id-strategy=index); use --device-id-strategy=uuid on MIG nodes")
        index = index_of(uuid)
        if index is None:
            raise AllocationError(f"GPU {uuid} is not on this node: no index for its CDI name "
                                  f"({CDI_KIND}=<index>, --device-id-strategy=index)")
        return f"{CDI_KIND}={index}"
    return f"{CDI_KIND}={uuid}"


def annotation_key(container: str) -> str:
    """`cdi.k8s.io/<plugin>_<id>`; the name part of a key is at most 63 characters."""
    ident = _NOT_ID.sub("-", container)[: 63 - len(PLUGIN_NAME) - 1] or "container"
    return f"{ANNOTATION_PREFIX}{PLUGIN_NAME}_{ident}"


def apply_strategy(c: ContainerAllocation, strategies: tuple[str, ...], id_strategy: str = "uuid",
                   index_of: Callable[[str], int | None] = lambda _u: None,
                   uuids: Sequence[str] | None = None) -> ContainerAllocation:
    """`c` as answered under `strategies` (a tuple of envvar, cdi-annotations, cdi-cri). `uuids`: the
    devices to name when `c` carries no HAMi device list (static MIG answers by device ID)."""
    if strategies == ("envvar",):
        return c
    uuids = list(dict.fromkeys(uuids if uuids is not None else (d.uuid for d in c.devices)))
    names = tuple(cdi_name(u, id_strategy, index_of) for u in uuids)
    envs: dict[str, str] = dict(c.envs)
    if "envvar" not in strategies:
        envs[VISIBLE] = "void"
    annotations: Mapping[str, str] = dict(c.annotations)
    if "cdi-annotations" in strategies:
        annotations = {**annotations, annotation_key(c.container): ",".join(names)}
    cdi_devices = names if "cdi-cri" in strategies else ()
    return dataclasses.replace(c, envs=envs, annotations=annotations, cdi_devices=cdi_devices)


def names_from_annotations(annotations: Mapping[str, str]) -> list[str]:
    """Every CDI device name in `cdi.k8s.io/*` annotations (what a CDI-aware runtime reads)."""
    out: list[str] = []
    for key, value in annotations.items():
        if key.startswith(ANNOTATION_PREFIX):
            out += [v.strip() for v in value.split(",") if v.strip()]
    return out
