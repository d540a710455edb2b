"""Property tests of the pure doctor/tune parsers and decisions.

Covers: FilteringFailed texts written by the scheduler (`messages.filtering_failed_messages`) parse back
to the same reason keys and nodes; the metrics parser reads back generated expositions (current
and legacy labels); `node_health` and `diagnose_pod` never raise on arbitrary annotation text and
always return a known leaf.
"""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from hami.device import codec
from hami.doctor import recommend as tuning
from hami.doctor.tree import (
    EventFact,
    NodeFacts,
    PodFacts,
    SchedulerFact,
    diagnose_pod,
    failed_reasons,
    node_health,
)
from hami.scheduler.placement.fit import gen_reason
from hami.scheduler.placement.messages import filtering_failed_messages

node_names = st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)
keys = st.sampled_from(["CardInsufficientMemory", "CardInsufficientCore", "NodeUnfitPod", "CardTypeMismatch",
                        "ExclusiveDeviceAllocateConflict", "NumaNotFit"])


@given(st.dictionaries(node_names, st.dictionaries(keys, st.integers(1, 8), min_size=1), min_size=1, max_size=6))
def test_failed_reasons_read_back_what_the_scheduler_writes(failed):
    texts = filtering_failed_messages({n: gen_reason(r, 8) for n, r in failed.items()})
    events = [EventFact("FilteringFailed", t, "Warning") for t in texts]
    got = failed_reasons(events)
    want: dict[str, set[str]] = {}
    for node, reasons in failed.items():
        for k in reasons:
            want.setdefault(k, set()).add(node)
    assert {k: set(v) for k, v in got.items()} == want


label_text = st.text(st.characters(min_codepoint=32, max_codepoint=126, blacklist_characters='"\\'), max_size=12)


@given(st.lists(st.tuples(label_text, label_text, st.integers(0, 7), st.sampled_from(tuning.METRICS),
                          st.integers(0, 2**40)), max_size=10), st.booleans())
def test_metrics_parser_reads_generated_expositions(rows, legacy):
    lines = []
    for ns, pod, dev, metric, value in rows:
        labels = (f'podnamespace="{ns}",podname="{pod}",ctrname="c",vdeviceid="{dev}"' if legacy
                  else f'namespace="{ns}",pod="{pod}",container="c",vdevice_index="{dev}"')
        lines.append(f"{metric}{{{labels}}} {value}")
    samples = tuning.parse_metrics("\n".join(lines) + "\n")
    assert [(tuning.device_key(s.labels), s.name, s.value) for s in samples] == [
        ((ns, pod, "c", str(dev)), metric, float(value)) for ns, pod, dev, metric, value in rows]


LEAVES = {"allocate-failed", "not-pending", "scheduler-not-running", "no-hami-resource", "wrong-scheduler-name",
          "no-event", "binding-lock-contention", "binding-api-error", "resource-quota", "node-register-missing",
          "handshake-stale", "filtering-failed", "filter-succeed-pending", "allocating"}
any_text = st.text(max_size=40)
annotations = st.dictionaries(st.sampled_from([codec.REGISTER_ANNOTATION, codec.HANDSHAKE_ANNOTATION,
                                               codec.NODE_LOCK_ANNOTATION, codec.BIND_PHASE_ANNOTATION,
                                               codec.VGPU_NODE_ANNOTATION, "other"]), any_text)


@settings(max_examples=150)
@given(annotations, annotations, st.lists(st.tuples(st.sampled_from(
    ["FilteringFailed", "FilteringSucceed", "BindingFailed", "BindingSucceed", "FailedScheduling"]), any_text),
    max_size=4), st.sampled_from([True, False, None]), st.sampled_from(["Pending", "Running", ""]),
    st.integers(-1, 9))
def test_diagnosis_and_node_health_never_raise(node_annos, pod_annos, events, alive, phase, alloc):
    now = time.time()
    node = NodeFacts("n1", node_annos, allocatable_gpu=alloc, capacity_gpu=alloc)
    h = node_health(node, now)
    # Healthy exactly when the node is not a GPU node or nothing is wrong with it, and every
    # problem is named; schedulable GPUs never exceed what the register annotation lists.
    assert h.healthy is (not (h.gpu_node and h.problems))
    assert h.schedulable_gpus >= 0 and all(isinstance(p, str) and p for p in h.problems)
    if node_annos.get(codec.REGISTER_ANNOTATION) is None:
        assert h.schedulable_gpus == 0
    pod = {"metadata": {"name": "p", "namespace": "d", "annotations": pod_annos},
           "spec": {"schedulerName": "hami-scheduler",
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
           "status": {"phase": phase}}
    facts = PodFacts(pod, [EventFact(r, m, time=now - i) for i, (r, m) in enumerate(events)],
                     SchedulerFact(alive, "test"), [node], now=now)
    d = diagnose_pod(facts)
    assert d.leaf in LEAVES and d.fix and d.pod == "d/p"
