"""Pick the GPU backend by name: the one place that knows every backend.

The backends (`fake.py`, `nvml.py`) import `backend.py` for the protocol and types; this module
imports them, and nothing in hami.gpu imports it back, so there is no import circle. Each backend
is imported only when chosen: importing hami.gpu never loads pynvml or yaml.
"""

from __future__ import annotations

from hami.gpu.backend import GpuBackend, GpuBackendError


def make_backend(name: str, fake_file: str = "", node_name: str = "") -> GpuBackend:
    """Build a backend by name: "fake" reads `fake_file` (YAML), "nvml" loads libnvidia-ml."""
    if name == "fake":
        if not fake_file:
            raise GpuBackendError("fake: --fake-gpus FILE is required with --gpu-backend fake")
        from hami.gpu.fake import FakeBackend

        return FakeBackend(fake_file, node_name=node_name)
    if name == "nvml":
        from hami.gpu.nvml import NvmlBackend

        return NvmlBackend()
    raise GpuBackendError(f"unknown GPU backend {name!r}: expected nvml or fake")
