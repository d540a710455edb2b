"""GPU access shared by the node agent and the monitor (neither imports the other, both import this).

`make_backend("nvml" | "fake", fake_file, node_name)` (select.py) returns a `GpuBackend` (backend.py);
fake.py and nvml.py implement it.
"""

from hami.gpu.backend import GpuBackend, GpuBackendError, GpuInfo
from hami.gpu.select import make_backend

__all__ = ["GpuBackend", "GpuBackendError", "GpuInfo", "make_backend"]
