"""Builders shared by the scheduler pure-logic tests."""

from __future__ import annotations

from hami.device.model import ContainerDeviceRequest, DeviceInfo
from hami.scheduler.placement.usage import DeviceState, NodeUsage


def dev(id, *, index=0, used=0, count=100, usedmem=0, totalmem=128, totalcore=100, usedcores=0,
        numa=0, type="NVIDIA", health=True, mode=""):
    return DeviceState(id=id, index=index, count=count, totalmem=totalmem, totalcore=totalcore,
                       type=type, numa=numa, mode=mode, health=health, used=used,
                       usedmem=usedmem, usedcores=usedcores)


def req(nums=1, memreq=0, pct=101, cores=0, type="NVIDIA"):
    return ContainerDeviceRequest(nums=nums, type=type, memreq=memreq, mempercentagereq=pct, coresreq=cores)


def info(id, *, index=0, count=10, devmem=8000, devcore=100, type="NVIDIA A100-SXM4-40GB", numa=0,
         health=True, mode="hami-core"):
    return DeviceInfo(id=id, count=count, devmem=devmem, devcore=devcore, type=type, index=index,
                      numa=numa, mode=mode, health=health)


def node(name, devices, cordoned=(), pair_scores=None):
    return NodeUsage(name, list(devices), cordoned, pair_scores)
