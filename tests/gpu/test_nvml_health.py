"""NVML health reads against a stand-in pynvml: every field converted to hami's units (mW -> W),
ECC read as volatile corrected/uncorrected totals, throttle reasons from the clock-event call (the
old throttle call when the new one is missing); a field NVML answers NOT_SUPPORTED (or any error)
is None, never 0; XID counts are passed through."""

from __future__ import annotations

import types

from hami.gpu.nvml_extra import read_health


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(f"nvml error {value}")
        self.value = value


def stand_in(values: dict, *, event_reasons=True):
    def get(key):
        def fn(*args):
            v = values.get(key)
            if v is None:
                raise NVMLError(3)  # NOT_SUPPORTED
            return v
        return fn

    nv = types.SimpleNamespace(NVMLError=NVMLError, NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2,
                               NVML_MEMORY_ERROR_TYPE_CORRECTED=0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
                               NVML_VOLATILE_ECC=0)
    nv.nvmlDeviceGetTemperature = get("temp")
    nv.nvmlDeviceGetPowerUsage = get("power_mw")
    nv.nvmlDeviceGetEnforcedPowerLimit = get("limit_mw")
    nv.nvmlDeviceGetClockInfo = lambda h, kind: get({1: "sm", 2: "mem"}[kind])()
    nv.nvmlDeviceGetTotalEccErrors = lambda h, kind, counter: get({0: "sbe", 1: "dbe"}[kind])()
    nv.nvmlDeviceGetPcieReplayCounter = get("replay")
    nv.nvmlDeviceGetCurrentClocksThrottleReasons = get("reasons_old")
    if event_reasons:
        nv.nvmlDeviceGetCurrentClocksEventReasons = get("reasons")
    return nv


def test_all_fields_read_and_converted():
    nv = stand_in({"temp": 71, "power_mw": 250500, "limit_mw": 400000, "sm": 1410, "mem": 1593, "sbe": 4, "dbe": 1,
                   "replay": 9, "reasons": 0x24})
    h = read_health(nv, object(), "GPU-a", {79: 2})
    assert (h.temperature_c, h.power_w, h.power_limit_w) == (71, 250.5, 400.0)
    assert (h.sm_clock_mhz, h.mem_clock_mhz, h.ecc_corrected, h.ecc_uncorrected, h.pcie_replays) == (1410, 1593, 4, 1,
                                                                                                     9)
    assert h.throttle_reasons == 0x24 and h.xid_counts == {79: 2}


def test_not_supported_fields_are_none():
    h = read_health(stand_in({"temp": 40}), object(), "GPU-b", {})
    assert h.temperature_c == 40
    assert all(getattr(h, f) is None for f in ("power_w", "power_limit_w", "sm_clock_mhz", "mem_clock_mhz",
                                                "ecc_corrected", "ecc_uncorrected", "pcie_replays", "throttle_reasons"))


def test_old_throttle_call_used_when_clock_events_missing():
    h = read_health(stand_in({"reasons_old": 0x4}, event_reasons=False), object(), "GPU-c", {})
    assert h.throttle_reasons == 0x4
