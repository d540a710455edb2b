"""HAMi's exact texts for malformed pod annotations, golden from HAMi's own test cases.

Covers: ParseDeviceScoringWeights (pkg/util/device_scoring_weights_test.go: every valid and invalid
case, the full error text byte for byte); IsValidGPUSchedulerPolicy / IsValidNodeSchedulerPolicy
and GetGPUSchedulerPolicyByPod (pkg/util/scheduler_policy_test.go: an unrecognized value keeps the
configured policy, with HAMi's warning text); the admission webhook denying a GPU pod with bad
weights with that text (pkg/scheduler/webhook.go); /filter answering `calcScore failed <err> for pod
<name>` and recording it as a FilteringFailed event (pkg/scheduler/scheduler.go). The
gpumem-percentage text is pinned in test_webhook.py::test_gpumem_percentage_range.
"""

from __future__ import annotations

import pytest

from hami.device.model import ScoringWeights
from hami.scheduler.admission.webhook import WebhookSettings, mutate_pod
from hami.scheduler.placement import policy
from hami.scheduler.placement.policy import PolicyError, parse_scoring_weights
from tests.kube.helpers import eventually, pod_obj
from tests.kube.scheduler_env import hami_nodes, running_env

KEY = "hami.io/device-scoring-weights"


@pytest.mark.parametrize("value,want", [
    ("slot=1,core=2,memory=3", ScoringWeights(1, 2, 3)),
    (" memory = 3, slot = 1, core = 0 ", ScoringWeights(1, 0, 3)),
    ("slot=+2,core=0,memory=0", ScoringWeights(2, 0, 0)),
])
def test_valid_weights_as_hami_reads_them(value, want):
    assert parse_scoring_weights(value) == want


@pytest.mark.parametrize("value,problem", [
    ("", "expected slot, core, and memory weights"),
    ("slot=1,memory=3", "expected slot, core, and memory weights"),
    ("slot=1,core,memory=3", "expected key=value entries"),
    ("slot=1,core=high,memory=3", '"core" weight must be an integer'),
    ("slot=1,core=-1,memory=3", '"core" weight must not be negative'),
    ("slot=1,bandwidth=2,memory=3", 'unknown weight "bandwidth"'),
    ("slot=1,slot=2,memory=3", 'duplicate "slot" weight'),
    ("slot=0,core=0,memory=0", "at least one weight must be positive"),
    ("slot=1_0,core=1,memory=1", '"slot" weight must be an integer'),      # ParseInt base 10: no underscores
    ("slot=1,core=1,memory=99999999999999999999", '"memory" weight must be an integer'),  # out of int64
    ('slot=1,core="x",memory=1', '"core" weight must be an integer'),
])
def test_invalid_weights_get_hamis_error_text(value, problem):
    with pytest.raises(PolicyError) as e:
        parse_scoring_weights(value)
    quoted = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    assert str(e.value) == f"invalid {KEY} annotation {quoted}: {problem}"


@pytest.mark.parametrize("value,ok", [
    ("binpack", True), ("spread", True), ("numa", True), ("mutex", True), ("topology-aware", True),
    ("binpack,numa", True), ("binpack, numa", True), ("mutex,topology-aware", True),
    ("", False), ("   ", False), ("binpakc", False), ("Binpack", False), ("binpack,nmua", False), ("binpack,", False),
])
def test_gpu_policy_validity_as_hami(value, ok):
    assert policy.valid_gpu_policy(value) is ok


@pytest.mark.parametrize("value,ok", [
    ("binpack", True), ("spread", True), (" binpack", True), ("spread ", True), ("", False), ("   ", False),
    ("binpakc", False), ("Spread", False), ("binpack,spread", False), ("numa", False),
])
def test_node_policy_validity_as_hami(value, ok):
    assert policy.valid_node_policy(value) is ok


@pytest.mark.parametrize("default,annotation,want", [
    ("binpack", "spread", "spread"), ("spread", "binpack,numa", "binpack,numa"),
    ("spread", "topology-aware", "topology-aware"), ("binpack", "binpakc", "binpack"), ("binpack", "", "binpack"),
    ("binpack", "binpack,nmua", "binpack"), ("spread", "binpakc", "spread"), ("spread", "", "spread"),
    ("spread", "binpack,nmua", "spread"),
])
def test_unrecognized_gpu_policy_keeps_the_configured_one(default, annotation, want):
    assert policy.gpu_policy_for({policy.GPU_POLICY_ANNOTATION: annotation}, default) == want


def test_ignored_policy_warnings_are_hamis_text():
    annos = {policy.GPU_POLICY_ANNOTATION: "binpakc", policy.NODE_POLICY_ANNOTATION: "Spread"}
    assert policy.ignored_policies(annos, "default", "policy-pod", "binpack", "spread") == [
        'ignoring unrecognized hami.io/gpu-scheduler-policy="binpakc" on pod default/policy-pod, '
        'using configured policy "spread"',
        'ignoring unrecognized hami.io/node-scheduler-policy="Spread" on pod default/policy-pod, '
        'using configured policy "binpack"',
    ]
    assert policy.node_policy_for(annos, "binpack") == "binpack"
    assert policy.node_policy_for({policy.NODE_POLICY_ANNOTATION: " spread "}, "binpack") == "spread"
    assert policy.ignored_policies({policy.NODE_POLICY_ANNOTATION: "spread"}, "d", "p", "binpack", "spread") == []


def test_webhook_denies_a_gpu_pod_with_bad_weights_in_hamis_words():
    settings = WebhookSettings(scheduler_name="hami-scheduler")
    bad = pod_obj("w", annotations={KEY: "slot=1,core=-1,memory=3"}, scheduler="")
    d = mutate_pod(bad, settings)
    assert not d.allowed and d.code == 403
    assert d.message == f'invalid {KEY} annotation "slot=1,core=-1,memory=3": "core" weight must not be negative'
    no_gpu = pod_obj("w", gpus=0, annotations={KEY: "nonsense"}, scheduler="")
    assert mutate_pod(no_gpu, settings).allowed  # HAMi checks only pods asking for its devices


async def test_filter_answers_calcscore_failed_and_records_the_event(apiserver):
    async with running_env(apiserver, hami_nodes(1)) as env:
        p = env.create_pod(pod_obj("weighty", annotations={KEY: "slot=1,core,memory=3"}))
        out = await env.filter(p, ["n0"])
        want = (f'calcScore failed invalid {KEY} annotation "slot=1,core,memory=3": expected key=value entries '
                "for pod weighty")
        assert out["Error"] == want

        def recorded():
            return [e.obj for e in env.store.list("events", "default")[1]
                    if e.obj.get("reason") == "FilteringFailed" and e.obj.get("message") == want]
        await eventually(recorded, 5)
