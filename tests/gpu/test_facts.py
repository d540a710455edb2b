"""GPU facts a DRA ResourceSlice publishes (hami.gpu.facts): versions and bus id.

Covers: the fake backend reads `compute_capability`, `driver_version`, `cuda_driver_version` and
`bus_id` per GPU ("" when left out) and refuses a non-string; the NVML reader against a stand-in
pynvml (compute capability per GPU, driver and CUDA versions, a GPU whose compute capability call
fails keeps "").
"""

from __future__ import annotations

import types

import pytest

from hami.gpu.backend import GpuBackendError
from hami.gpu.facts import FactsSource, GpuFacts, cuda_version
from hami.gpu.fake import FakeBackend
from hami.gpu.nvml_extra import read_facts


def test_fake_backend_reads_versions_from_its_file(tmp_path):
    p = tmp_path / "gpus.yaml"
    p.write_text("gpus:\n"
                 "  - {uuid: GPU-0, memory_mib: 1024, compute_capability: '9.0', driver_version: 580.65.06,"
                 " cuda_driver_version: '13.0', bus_id: '0000:3b:00.0'}\n"
                 "  - {uuid: GPU-1, memory_mib: 1024}\n")
    b = FakeBackend(str(p))
    assert isinstance(b, FactsSource)
    facts = b.facts()
    assert facts["GPU-0"] == GpuFacts("GPU-0", "9.0", "580.65.06", "13.0", "0000:3b:00.0")
    assert (facts["GPU-1"].compute_capability, facts["GPU-1"].driver_version) == ("", "")
    p.write_text("gpus:\n  - {uuid: GPU-0, memory_mib: 1024, driver_version: 580}\n")
    with pytest.raises(GpuBackendError, match=r"gpus\[0\].driver_version: got 580, expected a string"):
        FakeBackend(str(p))


def test_nvml_reader_against_a_stand_in_pynvml():
    class NVMLError(Exception):
        pass

    def compute(h):
        if h == 1:
            raise NVMLError("not supported")
        return (8, 0)

    nv = types.SimpleNamespace(
        NVMLError=NVMLError, nvmlSystemGetDriverVersion=lambda: b"580.65.06",
        nvmlSystemGetCudaDriverVersion=lambda: 13000, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetCudaComputeCapability=compute,
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=f"00000000:3{h}:00.0".encode()))
    facts = read_facts(nv)
    assert facts["GPU-0"] == GpuFacts("GPU-0", "8.0", "580.65.06", "13.0", "0000:30:00.0")
    assert facts["GPU-1"].compute_capability == "" and facts["GPU-1"].driver_version == "580.65.06"
    assert cuda_version(12040) == "12.4"
