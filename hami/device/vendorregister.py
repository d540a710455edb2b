"""How a node registers each vendor of the table, decoded (pure, no I/O).

Every vendor but NVIDIA (whose register annotation the scheduler state reads itself, unchanged):

* `annotation` vendors: their device plugin writes `register.key` (Ascend:
  `hami.io/node-register-<commonWord>`, JSON as NVIDIA's; Hygon: `hami.io/node-dcu-register`,
  the legacy colon form). HAMi's errors: `annos not found <key>` is simply "not this vendor";
  an empty list is `no device found on node`.
* `capacity` vendors (Cambricon, Mthreads): cards derived from the node's capacity (codec.cambricon);
  AWS Neuron from its device and core capacity and the instance-type label (codec.awsneuron).

`registration_signature(annotations, capacity, table)` is the raw text every vendor's registration
depends on ("" when the node registers none), so a caller decodes only when it changes.
`decode_vendor_devices(node, annotations, capacity, table)` returns
`((vendor, devices), ...)` and the errors, one `<key>: <why>` per vendor that does not decode;
the devices carry `vendor` = the row's name, so the fit never mixes vendors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import replace

from hami.device import codec
from hami.device.codec import awsneuron as neuron_codec
from hami.device.codec import cambricon as cambricon_codec
from hami.device.codec import cards as cards_codec
from hami.device.codec import enflame as enflame_codec
from hami.device.codec import kunlunxin as kunlun_codec
from hami.device.codec import metax as metax_codec
from hami.device.model import DeviceInfo
from hami.device.request import quantity_as_int64
from hami.device.vendorhooks import HOOKS
from hami.device.vendors import Vendor, VendorTable

# Ascend: the node annotation saying its NPUs run HAMi-core soft partitioning (HAMi's
# nodeSupportHamiCore); the devices carry it as their mode, so the fit reads it per node.
NODE_VNPU_CORE = "hami-vnpu-core"
MODE_HAMI_CORE = "hami-core"


def registration_signature(annotations: Mapping[str, str], capacity: Mapping, table: VendorTable,
                           labels: Mapping[str, str] | None = None) -> str:
    if table.register_annotations.isdisjoint(annotations) and table.register_capacities.isdisjoint(capacity):
        return ""  # an NVIDIA-only node (the common case): no other vendor registers here
    parts = []
    for v in table.others:
        if v.register_source == "annotation":
            text = annotations.get(v.register_key)
            if text is not None:
                parts.append(f"{v.register_key}={text}")
            continue
        raw = capacity.get(v.capacity_trigger)
        if raw is None:
            continue
        if HOOKS[v.hook].capacity_with_instance_type:
            itype = (labels or {}).get(neuron_codec.INSTANCE_TYPE_LABEL, "")
            parts.append(f"{v.count_resource}={raw};{capacity.get(v.core_resource)};{itype}")
        elif v.capacity_trigger == v.count_resource:
            parts.append(f"{v.count_resource}={raw}")
            for key in (v.topology_losses_key, v.topology_scores_key):
                if key and key in annotations:  # MetaX GPU: its node score reads them
                    parts.append(f"{key}={annotations[key]}")
        else:
            parts.append(f"{v.core_resource}={raw};{capacity.get(v.memory_resource)}")
    if parts and NODE_VNPU_CORE in annotations:
        parts.append(f"{NODE_VNPU_CORE}={annotations[NODE_VNPU_CORE]}")
    return "\x00".join(parts)


def _capacity_int(capacity: Mapping, resource: str) -> tuple[object, int] | None:
    """(raw, value) of a node capacity the vendor registers through; None when the node has none.
    CodecError naming the resource when it is not an integer."""
    raw = capacity.get(resource)
    if raw is None:
        return None
    value = quantity_as_int64(raw)
    if value is None:
        raise codec.CodecError(f"{resource}: capacity {raw!r} is not an integer", field=resource, text=str(raw))
    return raw, value


@contextlib.contextmanager
def _naming(resource: str, raw: object) -> Iterator[None]:
    """A decode error from capacity-built devices, prefixed by the resource it came from."""
    try:
        yield
    except codec.CodecError as exc:
        raise codec.CodecError(f"{resource}: {exc}", field=resource, text=str(raw)) from None


def decode_one(v: Vendor, node: str, annotations: Mapping[str, str], capacity: Mapping,
               labels: Mapping[str, str] | None = None) -> tuple[DeviceInfo, ...]:
    """One vendor's devices on the node; () when the node does not register it. Raises
    CodecError (message prefixed by the key) when it registers it wrongly."""
    if (HOOKS[v.hook].capacity_cards or v.card_count) and v.register_source == "capacity":
        counted = _capacity_int(capacity, v.count_resource)
        if counted is None:
            return ()
        raw, cards = counted
        with _naming(v.count_resource, raw):
            if v.card_count:  # plain cards: each the row's count, memory and cores (MetaX GPU)
                topology = cards_codec.topology_info(
                    annotations.get(v.topology_losses_key) if v.topology_losses_key else None,
                    annotations.get(v.topology_scores_key) if v.topology_scores_key else None)
                return cards_codec.plain_cards(node, cards, v.name, v.capacity_id, v.count_resource, v.card_count,
                                               v.card_memory, v.cores_per_card, topology)
            return kunlun_codec.devices_from_capacity(node, cards, vendor=v.name, id_format=v.capacity_id,
                                                      resource=v.count_resource)
    if HOOKS[v.hook].capacity_with_instance_type:
        counted = _capacity_int(capacity, v.count_resource)
        if counted is None:
            return ()
        raw, devices = counted
        cores = quantity_as_int64(capacity.get(v.core_resource, 0)) or 0
        with _naming(v.count_resource, raw):
            return neuron_codec.devices_from_capacity(
                node, devices, cores, (labels or {}).get(neuron_codec.INSTANCE_TYPE_LABEL, ""), vendor=v.name,
                id_format=v.capacity_id, default_cores=v.cores_per_card, resource=v.count_resource)
    if v.register_source == "capacity":
        counted = _capacity_int(capacity, v.core_resource)
        if counted is None:
            return ()
        raw, cores = counted
        mem = quantity_as_int64(capacity.get(v.memory_resource, 0)) or 0
        with _naming(v.core_resource, raw):
            return cambricon_codec.devices_from_capacity(node, cores, mem, vendor=v.name, id_format=v.capacity_id,
                                                         cores_per_card=v.cores_per_card,
                                                         memory_unit=v.memory_unit,
                                                         resource=v.core_resource)
    text = annotations.get(v.register_key)
    if text is None:
        return ()
    try:
        if v.register_format == "metax":
            devices = metax_codec.decode_sdevices(text, vendor=v.name)
            if not devices:
                raise codec.CodecError("no sdevice found on node", field=v.register_key, text=text)
            return devices
        if v.register_format == "enflame-drs":  # Enflame DRS: the capacity JSON, not a device list
            return enflame_codec.decode_drs_capacity(node, text, vendor=v.name)
        if v.register_format == "legacy":
            devices = codec.decode_node_devices_legacy(text)
        else:
            devices = codec.decode_node_devices_json(text)
    except codec.CodecError as exc:
        raise codec.CodecError(f"{v.register_key}: {exc}", field=v.register_key, text=text) from None
    if not devices:
        raise codec.CodecError(f"{v.register_key}: no device found on node", field=v.register_key, text=text)
    flag = annotations.get(NODE_VNPU_CORE)
    if HOOKS[v.hook].vnpu_chips and (flag is not None or v.vnpu_core):
        # The node's word (else the chip's default) decides; without either the devices stay as
        # registered (HAMi's Ascend plugin writes no mode), so the text re-encodes byte-exact.
        mode = MODE_HAMI_CORE if (flag == "true" if flag is not None else v.vnpu_core) else ""
        return tuple(replace(d, vendor=v.name, mode=mode) for d in devices)
    if v.register_cores:
        return tuple(replace(d, vendor=v.name, devcore=v.register_cores) for d in devices)
    return tuple(replace(d, vendor=v.name) for d in devices)


def decode_vendor_devices(node: str, annotations: Mapping[str, str], capacity: Mapping,
                          table: VendorTable, labels: Mapping[str, str] | None = None,
                          ) -> tuple[tuple[tuple[str, tuple[DeviceInfo, ...]], ...], tuple[str, ...]]:
    groups = []
    errors = []
    for v in table.others:
        try:
            devices = decode_one(v, node, annotations, capacity, labels)
        except codec.CodecError as exc:
            errors.append(str(exc))
            continue
        if devices:
            groups.append((v.name, devices))
    return tuple(groups), tuple(errors)
