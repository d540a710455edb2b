"""hami.kubesched.schedconfig: a KubeSchedulerConfiguration read the way kube-scheduler reads it.

IsInterested: no managedResources means every pod; otherwise a container's or an init container's
requests or limits must name one. buildExtenders: the extenders' ignoredByScheduler resources replace
the profile's NodeResourcesFit ignoredResources; with none, the profile's args stand. Bad shapes name
the field."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.kubesched.schedconfig import ConfigShapeError, is_interested, profile


def _pod(group="containers", part="limits", names=("cpu",)):
    return {"spec": {group: [{"name": "c", "resources": {part: dict.fromkeys(names, "1")}}]}}


def test_no_managed_resources_means_every_pod():
    assert is_interested(frozenset(), {"spec": {}}) and is_interested(frozenset(), _pod())


@pytest.mark.parametrize("group", ["containers", "initContainers"])
@pytest.mark.parametrize("part", ["requests", "limits"])
def test_a_managed_resource_anywhere_in_the_pod_interests_the_extender(group, part):
    managed = frozenset({"example.com/gpu"})
    assert is_interested(managed, _pod(group, part, ("cpu", "example.com/gpu")))
    assert not is_interested(managed, _pod(group, part, ("cpu", "example.com/gpumem")))


@given(st.lists(st.sampled_from(["a/x", "a/y", "b/z", "cpu"]), max_size=4),
       st.lists(st.sampled_from(["a/x", "b/z"]), max_size=2))
def test_interest_is_a_nonempty_intersection_or_no_managed_list(asked, managed):
    expected = not managed or bool(set(asked) & set(managed))
    assert is_interested(frozenset(managed), _pod(names=tuple(asked))) == expected


def test_extenders_ignored_resources_replace_the_profiles_fit_args():
    doc = {"profiles": [{"schedulerName": "s", "pluginConfig": [
        {"name": "NodeResourcesFit", "args": {"ignoredResources": ["x/a"], "ignoredResourceGroups": ["g"]}}]}],
        "extenders": [{"urlPrefix": "http://e", "filterVerb": "filter", "httpTimeout": "1m30s",
                       "managedResources": [{"name": "x/b", "ignoredByScheduler": True}, {"name": "x/c"}]}]}
    prof = profile(doc, "s")
    assert prof.fit_ignored == {"x/b"} and prof.fit_ignored_groups == {"g"}
    (ext,) = prof.extenders
    assert ext.managed == {"x/b", "x/c"} and ext.http_timeout == 90.0 and ext.bind_verb == ""
    doc["extenders"][0]["managedResources"] = []  # no extender ignores anything: the profile's args stand
    assert profile(doc, "s").fit_ignored == {"x/a"}


def test_no_profiles_is_the_default_scheduler_profile_and_bad_shapes_name_the_field():
    assert profile({}, "default-scheduler").extenders == ()
    with pytest.raises(ConfigShapeError, match="no profile has schedulerName 'other'"):
        profile({}, "other")
    with pytest.raises(ConfigShapeError, match=r"extenders\[0\].managedResources\[0\].name"):
        profile({"extenders": [{"managedResources": [{"ignoredByScheduler": True}]}]}, "default-scheduler")
    with pytest.raises(ConfigShapeError, match=r"extenders\[0\].httpTimeout"):
        profile({"extenders": [{"httpTimeout": "soon"}]}, "default-scheduler")
    with pytest.raises(ConfigShapeError, match="ignoredResources"):
        profile({"profiles": [{"pluginConfig": [{"name": "NodeResourcesFit", "args": {"ignoredResources": "x"}}]}]},
                "default-scheduler")
