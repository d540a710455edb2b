"""`batch/v1` Jobs in the embedded cluster: the API server's validation and the Job controller's plan. Pure.

So the shipped examples (deploy/examples/*.yaml hold Pods and Jobs) apply to the embedded default as
they do to a cluster. `job_plan(job, pods)` is pure: the pods to create and the status to write, as
kube-controller-manager's Job controller decides them for the simple cases the examples use
(`parallelism`, `completions`, `backoffLimit`; no indexed jobs, no pod failure policy, no TTL).
`hami.sim.controllers.jobs.JobController` runs it on every change of a Job or of its pods.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

JOBS_KEY = "jobs.batch"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
UID_LABEL = "batch.kubernetes.io/controller-uid"
DEFAULT_BACKOFF_LIMIT = 6


class FieldInvalid(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def validate(job: dict) -> None:
    """What kube-apiserver refuses in a Job the examples could get wrong (422 naming the field)."""
    spec = job.get("spec")
    if not isinstance(spec, dict):
        raise FieldInvalid("spec", "Required value")
    template = spec.get("template")
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise FieldInvalid("spec.template.spec", "Required value")
    containers = template["spec"].get("containers")
    if not isinstance(containers, list) or not containers:
        raise FieldInvalid("spec.template.spec.containers", "Required value")
    policy = template["spec"].get("restartPolicy")
    if policy not in ("Never", "OnFailure"):
        raise FieldInvalid("spec.template.spec.restartPolicy",
                           f'Unsupported value: "{policy}": supported values: "OnFailure", "Never"')
    for key in ("parallelism", "completions", "backoffLimit"):
        value = spec.get(key)
        if value is not None and (type(value) is not int or value < 0):
            raise FieldInvalid(f"spec.{key}", "must be greater than or equal to 0")


@dataclass(frozen=True, slots=True)
class JobPlan:
    create: int  # pods to create now
    status: dict  # the Job's status as the controller would write it


def job_plan(job: dict, pods: Sequence[dict]) -> JobPlan:
    spec = job.get("spec") or {}
    parallelism = spec.get("parallelism", 1)
    completions = spec.get("completions")
    completions = parallelism if completions is None and "parallelism" in spec else (completions or 1)
    backoff = spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)
    phases = [(p.get("status") or {}).get("phase", "Pending") for p in pods
              if not (p.get("metadata") or {}).get("deletionTimestamp")]
    succeeded, failed = phases.count("Succeeded"), phases.count("Failed")
    active = len(phases) - succeeded - failed
    status: dict = {"active": active, "succeeded": succeeded, "failed": failed, "ready": phases.count("Running")}
    conditions = []
    if succeeded >= completions:
        conditions.append({"type": "Complete", "status": "True"})
        create = 0
    elif failed > backoff:
        conditions.append({"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                           "message": "Job has reached the specified backoff limit"})
        create = 0
    else:
        create = max(0, min(parallelism, completions - succeeded) - active)
    if conditions:
        status["conditions"] = conditions
    return JobPlan(create, status)


def pod_for(job: dict) -> dict:
    meta = job["metadata"]
    template = job["spec"]["template"]
    tmeta = template.get("metadata") or {}
    labels = {**(tmeta.get("labels") or {}), JOB_NAME_LABEL: meta["name"], "job-name": meta["name"],
              UID_LABEL: meta.get("uid", ""), "controller-uid": meta.get("uid", "")}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{meta['name']}-{secrets.token_hex(3)[:5]}", "namespace": meta.get("namespace"),
                     "labels": labels, "annotations": dict(tmeta.get("annotations") or {}),
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                          "uid": meta.get("uid", ""), "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": dict(template["spec"]),
    }
