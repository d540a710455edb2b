"""scripts/gpu-e2e without a GPU (`--backend fake`): the flow a GPU machine runs keeps working in CI.

Covers: in device-plugin mode and in DRA mode, a pod asking 2,048 MiB and 30 cores on hami's embedded
cluster (one node) runs, and the env its container was given carries CUDA_DEVICE_MEMORY_LIMIT_0=2048m and
CUDA_DEVICE_SM_LIMIT=30 (the real-GPU run then hands it to HAMi-core: docs/gpu-validation.md).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
@pytest.mark.parametrize("mode", [[], ["--dra"]], ids=["device-plugin", "dra"])
def test_gpu_e2e_dry_run(mode):
    res = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu-e2e"), "--backend", "fake", *mode],
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert '"CUDA_DEVICE_MEMORY_LIMIT_0": "2048m"' in res.stdout and res.stdout.rstrip().endswith("OK")
