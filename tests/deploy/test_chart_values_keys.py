"""Values keys: typos refused by name, HAMi v2.10's keys honoured or refused saying why.

Covers: values.schema.json is what scripts/gen-chart-schema makes of values.yaml (a values key added
without regenerating fails here, naming the command); a misspelt key is refused by helm's schema at
every level (top, nested, component image) naming it; a typo one slip from a known key (case, a letter
dropped, doubled or swapped) also names that key in helm's own error, a name near nothing gets no
guess, and scripts/helm-template adds the nearest known key (difflib) for any typo; maps of user data
(labels, resources, selectors, env) take any key; HAMi v2.10's own values.yaml (tests/data/hami/, from
Project-HAMi/HAMi at v2.10.0) is refused with exactly the list of keys we refuse (its projecthami/hami
images), and with those set to our image it renders objects valid for Kubernetes, with the HAMi keys
we map in effect (kube-scheduler image, leader election, service type, extra args, split count,
webhook whitelist); a HAMi-only key at HAMi's default is accepted and at any other value refused with
its reason, all refusals in one message; scheduler.kubeScheduler.imageTag (HAMi's older key) sets the
kube-scheduler tag and image.tag wins over it.
"""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml

from tests.deploy.chart import CHART, ROOT, container, find, objects, one

HAMI_VALUES = ROOT / "tests" / "data" / "hami" / "hami-v2.10.0-values.yaml"
REFUSED_IN_HAMI_DEFAULTS = ["devicePlugin.image.repository", "devicePlugin.monitor.image.repository",
                            "scheduler.extender.image.repository"]


def _error(values: dict) -> str:
    import helm_python as helm

    with pytest.raises(helm.HelmError) as err:
        objects(values)
    return str(err.value)


def test_schema_is_generated_from_values_yaml():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-chart-schema"), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("values,where,name", [
    ({"sheduler": {"replicas": 2}}, "at ''", "sheduler"),
    ({"devicePlugin": {"deviceSplitCont": 3}}, "at '/devicePlugin'", "deviceSplitCont"),
    ({"scheduler": {"kubeScheduler": {"imageTg": "v1.30.0"}}}, "at '/scheduler/kubeScheduler'", "imageTg"),
    ({"scheduler": {"extender": {"image": {"regsitry": "r.example"}}}}, "at '/scheduler/extender/image'", "regsitry"),
    ({"devicePlugin": {"monitor": {"metricPort": 1}}}, "at '/devicePlugin/monitor'", "metricPort"),
    ({"devices": {"nvidia": {"gpuCorePolcy": "force"}}}, "at '/devices/nvidia'", "gpuCorePolcy"),
])
def test_misspelt_keys_are_refused_by_name_at_every_level(values, where, name):
    text = _error(values)
    assert f"{where}: additional properties '{name}' not allowed" in text


@pytest.mark.parametrize("values,name,known", [
    ({"devicePlugin": {"deviceSplitcount": 3}}, "deviceSplitcount", "deviceSplitCount"),  # case
    ({"devicePlugin": {"deviceSplitCont": 3}}, "deviceSplitCont", "deviceSplitCount"),  # dropped
    ({"sheduler": {"replicas": 2}}, "sheduler", "scheduler"),
    ({"scheduler": {"kubeBurts": 5}}, "kubeBurts", "kubeBurst"),  # swapped
    ({"scheduler": {"kubeScheduler": {"imageTagg": "v1"}}}, "imageTagg", "imageTag"),  # doubled
    ({"devicePlugin": {"monitor": {"metricPort": 1}}}, "metricPort", "metricsPort"),
])
def test_helm_names_the_known_key_a_typo_is_one_slip_from(values, name, known):
    text = _error(values)
    assert f"additional properties '{name}' not allowed" in text
    assert f"invalid propertyName '{name}'" in text
    assert [ln.strip() for ln in text.splitlines() if "value must be" in ln] == [f"- at '': value must be '{known}'"]


def test_a_name_near_no_known_key_gets_no_guess():
    text = _error({"global": {"zzz": 1}})
    assert "at '/global': additional properties 'zzz' not allowed" in text and "value must be" not in text


def test_helm_template_names_the_nearest_known_key():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "helm-template"), "--set-string",
                          "image.registry=r.example", "--set-string", "devicePlugin.deviceSplitCont=3",
                          "--set-string", "sheduler.replicas=2", "--set-string", "global.zzz=1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert "devicePlugin.deviceSplitCont is not a key of this chart; did you mean devicePlugin.deviceSplitCount?" \
        in out.stderr
    assert "sheduler is not a key of this chart; did you mean scheduler?" in out.stderr
    assert "global.zzz is not a key of this chart\n" in out.stderr  # nothing close: no guess


def test_maps_of_user_data_take_any_key():
    docs = objects({"global": {"labels": {"team": "ml"}},
                    "scheduler": {"nodeSelector": {"pool": "infra"},
                                  "extender": {"resources": {"limits": {"cpu": "1"}}}},
                    "devicePlugin": {"nvidiaNodeSelector": {"nvidia.com/gpu.present": "true"},
                                     "extraEnvs": {"FOO": "bar"}}})
    pod = one(docs, "DaemonSet", "hami-device-plugin")["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["nvidia.com/gpu.present"] == "true"  # merged with the default gpu: "on"
    assert container(docs, "Deployment", "hami-scheduler")["resources"] == {"limits": {"cpu": "1"}}


def _hami_values() -> dict:
    return yaml.safe_load(HAMI_VALUES.read_text())


def test_hamis_own_values_file_is_refused_with_the_keys_we_refuse():
    text = _error(_hami_values())
    refused = [line[2:].split("=")[0] for line in text.splitlines() if line.startswith("- ")]
    assert refused == REFUSED_IN_HAMI_DEFAULTS
    assert "that is HAMi's Go image, which does not take hami's flags" in text


def test_hamis_values_with_our_image_render_with_the_keys_we_map():
    import kubernetes_validate

    values = _hami_values()
    for key in REFUSED_IN_HAMI_DEFAULTS:
        node = values
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = "ml/hami"
    docs = objects(values)
    for d in docs:
        kubernetes_validate.validate(d, "1.30", strict=True)
    hami = values["scheduler"]
    ks = container(docs, "Deployment", "kube-scheduler")
    assert ks["image"].startswith("registry.cn-hangzhou.aliyuncs.com/google_containers/kube-scheduler:v")
    assert ks["command"].count("--config=/config/config.yaml") == 1 and "-v=4" in ks["command"]
    ext = container(docs, "Deployment", "hami-scheduler")
    assert ext["image"].endswith("/ml/hami:0.1.0")
    args = ext.get("args", []) + ext.get("command", [])
    assert "--debug" in args and "-v=4" in args  # scheduler.extender.extraArgs
    assert any(a.startswith("--leader-elect") for a in args) == hami["leaderElect"]
    assert one(docs, "Service", "hami-scheduler")["spec"]["type"] == hami["service"]["type"] == "NodePort"
    dev = yaml.safe_load(one(docs, "ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"])
    assert dev["nvidia"]["deviceSplitCount"] == values["devicePlugin"]["deviceSplitCount"]
    # the node agent and the monitor; no Ascend, mock or other vendors' plugins
    assert sorted(d["metadata"]["name"] for d in find(docs, "DaemonSet")) == ["hami-device-plugin",
                                                                             "hami-device-plugin-monitor"]


@pytest.mark.parametrize("values,refused", [
    ({"devicePlugin": {"migStrategy": "single"}}, ['devicePlugin.migStrategy="single": MIG strategy is per node']),
    ({"devices": {"ascend": {"enabled": True}}, "podSecurityPolicy": {"enabled": True}},
     ["devices.ascend.enabled=true: other vendors are configured in the device config",
      "podSecurityPolicy.enabled=true: PodSecurityPolicy is gone"]),
    ({"scheduler": {"extender": {"image": {"pullSecrets": ["regcred"]}}}},
     ['scheduler.extender.image.pullSecrets=["regcred"]: image pull secrets are global.imagePullSecrets']),
])
def test_hami_only_keys_off_their_default_are_refused_saying_why(values, refused):
    text = _error(values)
    for line in refused:
        assert f"\n- {line}" in text


def test_hami_only_keys_at_hamis_default_change_nothing():
    base = objects({})
    same = objects({"devices": {"ascend": {"enabled": False}, "kunlun": {"enabled": True}},
                    "mockDevicePlugin": {"enabled": False}, "devicePlugin": {"migStrategy": "none"},
                    "scheduler": {"patch": {"enabled": True}, "overwriteEnv": "false"},
                    "global": {"imageTag": "v2.10.0"}})
    assert yaml.safe_dump_all(same) == yaml.safe_dump_all(base)


def test_kube_scheduler_image_tag_key_from_older_hami_is_honoured():
    def image(values):
        return container(objects(values), "Deployment", "kube-scheduler")["image"]

    assert image({"scheduler": {"kubeScheduler": {"imageTag": "v1.29.4"}}}).endswith("/kube-scheduler:v1.29.4")
    both = {"scheduler": {"kubeScheduler": {"imageTag": "v1.29.4", "image": {"tag": "v1.30.1"}}}}
    assert image(copy.deepcopy(both)).endswith("/kube-scheduler:v1.30.1")
    keys = yaml.safe_load((CHART / "values.yaml").read_text())["scheduler"]["kubeScheduler"]
    assert "imageTag" in keys
