"""batch/v1 Jobs in the embedded cluster: the shipped examples apply and run there.

Covers: the pure plan (pods to create for parallelism/completions, Complete once enough succeed, Failed
past backoffLimit, deleted pods not counted); the API server's Job validation (422 naming the field);
every file of deploy/examples applies with real kubectl to `hami --role all --embedded`, each Job's pod
is created with the Job's labels and ownerReference and runs with its GPU slice, `kubectl get jobs`
shows the Job active, and deleting the Job deletes its pod.
"""

from __future__ import annotations

import glob
import json
import os

import pytest

from hami.sim.controllers.jobspec import JOB_NAME_LABEL, FieldInvalid, job_plan, validate
from tests.e2e.embedded import wait_until
from tests.e2e.test_embedded import embedded  # noqa: F401  (the module-scoped embedded system)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _pod(phase: str, deleting: bool = False) -> dict:
    meta = {"name": "p", "deletionTimestamp": "2026-11-26T00:00:00Z"} if deleting else {"name": "p"}
    return {"metadata": meta, "status": {"phase": phase}}


def _job(**spec) -> dict:
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}
    return {"metadata": {"name": "j", "namespace": "default", "uid": "u"}, "spec": {"template": template, **spec}}


def test_plan_creates_up_to_parallelism_and_completes():
    assert job_plan(_job(), []).create == 1
    assert job_plan(_job(parallelism=3, completions=5), [_pod("Running")]).create == 2
    assert job_plan(_job(parallelism=3, completions=5), [_pod("Succeeded")] * 4).create == 1
    done = job_plan(_job(completions=2), [_pod("Succeeded"), _pod("Succeeded")])
    assert done.create == 0 and done.status["conditions"][0]["type"] == "Complete"
    assert job_plan(_job(), [_pod("Running", deleting=True)]).create == 1  # a terminating pod is not active


def test_plan_stops_past_the_backoff_limit():
    failed = job_plan(_job(backoffLimit=1), [_pod("Failed"), _pod("Failed")])
    assert failed.create == 0 and failed.status["conditions"][0]["reason"] == "BackoffLimitExceeded"
    assert job_plan(_job(backoffLimit=2), [_pod("Failed")]).create == 1


@pytest.mark.parametrize("mutate,field", [
    (lambda j: j["spec"].pop("template"), "spec.template.spec"),
    (lambda j: j["spec"]["template"]["spec"].update(restartPolicy="Always"), "spec.template.spec.restartPolicy"),
    (lambda j: j["spec"]["template"]["spec"].update(containers=[]), "spec.template.spec.containers"),
    (lambda j: j["spec"].update(parallelism=-1), "spec.parallelism"),
])
def test_validation_names_the_field(mutate, field):
    job = _job()
    mutate(job)
    with pytest.raises(FieldInvalid) as err:
        validate(job)
    assert err.value.field == field


@pytest.mark.slow
def test_every_shipped_example_applies_and_jobs_run(embedded):  # noqa: F811
    run = embedded["kubectl"]
    files = sorted(glob.glob(os.path.join(ROOT, "deploy", "examples", "*.yaml")))
    assert files
    jobs = []
    for path in files:
        out = run("apply", "--validate=false", "-f", path)  # any error fails the test (check=True)
        jobs += [line.split()[0].split("/")[1] for line in out.splitlines() if line.startswith("job.batch/")]
    assert jobs, "the examples ship Jobs"
    for name in jobs:
        def job_pod_running(name=name):
            pods = json.loads(run("get", "pods", "-l", f"{JOB_NAME_LABEL}={name}", "-o", "json"))["items"]
            return pods if pods and pods[0]["status"].get("phase") == "Running" else None

        (pod,) = wait_until(job_pod_running, 120, what=f"the pod of job {name} Running")
        owner = pod["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("Job", name, True)
        assert "CUDA_DEVICE_SM_LIMIT" in pod["metadata"]["annotations"]["sim.hami.io/allocated-env"]
    wait_until(lambda: json.loads(run("get", "job", jobs[0], "-o", "json")).get("status", {}).get("active") == 1, 30,
               what="job status active")
    assert jobs[0] in run("get", "jobs")
    run("delete", "job", jobs[0], "--wait=false")
    wait_until(lambda: not json.loads(run("get", "pods", "-l", f"{JOB_NAME_LABEL}={jobs[0]}", "-o", "json"))["items"],
               60, what="the deleted job's pod gone")
