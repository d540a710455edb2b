"""GPU access shared by the node agent and the monitor (neither imports the other, both import this).

`make_backend("nvml" | "fake", fake_file, node_name)` returns a `GpuBackend`.
"""

from hami.gpu.backend import GpuBackend, GpuBackendError, GpuInfo, make_backend

__all__ = ["GpuBackend", "GpuBackendError", "GpuInfo", "make_backend"]
