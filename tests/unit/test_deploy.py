"""The Kubernetes manifests (``deploy/k8s``) hold the multi-worker design together.

What they must get right is easy to break in a YAML edit and invisible until a rollout or a
dead worker: the probes on the right paths, a grace period that covers the preStop sleep and
the drain, the ingress hashing on the session id with timeouts as long as a call, ports that
line up from the Ingress to the container, configuration keys that name real fields, and a
kustomization that ships every file. Each check is a function that raises on a broken
manifest; the last tests feed each one a broken copy to show that it does.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from voxpipe.config import Config

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
HASH_ANNOTATION = "nginx.ingress.kubernetes.io/upstream-hash-by"
NGINX = "nginx.ingress.kubernetes.io/"
# After the drain the process still flushes its queued store writes (RedisStore.aclose waits
# up to 5 s) and exits; the grace period must leave at least this much after the drain.
SHUTDOWN_MARGIN_S = 5.0
# Loading and warming every model: tens of seconds on 2 cores; a cold node is slower.
STARTUP_BUDGET_S = 120.0

Manifest = dict[str, Any]


def load(path: Path) -> list[Manifest]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def bundle() -> list[Manifest]:
    """Every Kubernetes object of the folder (not the kustomizations themselves)."""
    objects: list[Manifest] = []
    for path in sorted(K8S.rglob("*.yaml")):
        if path.name != "kustomization.yaml":
            objects += load(path)
    return objects


def find(objects: list[Manifest], kind: str, name: str | None = None) -> list[Manifest]:
    return [
        o
        for o in objects
        if o.get("kind") == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objects: list[Manifest], kind: str, name: str) -> Manifest:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name!r}, found {len(found)}"
    return found[0]


def worker(objects: list[Manifest]) -> Manifest:
    return one(objects, "Deployment", "voxpipe")


def container(deployment: Manifest) -> Manifest:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    matches = [c for c in containers if c["name"] == "voxpipe"]
    assert len(matches) == 1, "the Deployment has no container named voxpipe"
    return matches[0]


def literal_env(objects: list[Manifest]) -> dict[str, str]:
    """The VOXPIPE_* values a worker pod starts with: the ConfigMap, then literal env."""
    env: dict[str, str] = {}
    c = container(worker(objects))
    for source in c.get("envFrom", []):
        if "configMapRef" in source:
            env.update(one(objects, "ConfigMap", source["configMapRef"]["name"])["data"])
    for var in c.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
    return env


def env_names(objects: list[Manifest]) -> list[str]:
    names = list(literal_env(objects))
    names += [v["name"] for v in container(worker(objects)).get("env", [])]
    return [n for n in names if n.startswith("VOXPIPE_")]


@pytest.fixture
def pod_config(monkeypatch: pytest.MonkeyPatch) -> Config:
    """The configuration a worker pod runs with: the defaults under the manifests' env."""
    import os

    for name in list(os.environ):
        if name.startswith("VOXPIPE_"):
            monkeypatch.delenv(name)
    for name, value in literal_env(bundle()).items():
        monkeypatch.setenv(name, value)
    return Config()


# -- the checks ----------------------------------------------------------------------------


def check_env_names(names: list[str]) -> None:
    """Every VOXPIPE_<SECTION>__<FIELD> names a real field: pydantic-settings ignores one
    that does not, so a typo would silently leave the default in force."""
    for name in names:
        match = re.fullmatch(r"VOXPIPE_([A-Z_]+?)__([A-Z0-9_]+)", name)
        assert match, f"{name} is not VOXPIPE_<SECTION>__<FIELD>"
        section, field = match.group(1).lower(), match.group(2).lower()
        assert section in Config.model_fields, f"{name}: no config section {section!r}"
        model = Config.model_fields[section].annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        assert field in model.model_fields, f"{name}: no field {section}.{field}"


def check_probes(deployment: Manifest) -> None:
    c = container(deployment)
    port_names = {p.get("name") for p in c["ports"]} | {p["containerPort"] for p in c["ports"]}
    for probe, path in (
        ("readinessProbe", "/readyz"),
        ("livenessProbe", "/healthz"),
        ("startupProbe", "/readyz"),
    ):
        assert probe in c, f"the worker has no {probe}"
        get = c[probe].get("httpGet", {})
        assert get.get("path") == path, f"{probe} must GET {path}, not {get.get('path')}"
        assert get.get("port") in port_names, f"{probe} probes port {get.get('port')!r}"
    startup = c["startupProbe"]
    budget = startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3)
    assert budget >= STARTUP_BUDGET_S, f"startupProbe allows {budget} s for load + warm-up"


def prestop_sleep_s(deployment: Manifest) -> float:
    """The preStop hook's sleep: ``sleep N`` in its command (also inside ``sh -c``), or the
    native ``sleep: {seconds: N}`` action."""
    pre = container(deployment).get("lifecycle", {}).get("preStop", {})
    if "sleep" in pre:
        return float(pre["sleep"]["seconds"])
    command = " ".join(str(word) for word in pre.get("exec", {}).get("command", []))
    match = re.search(r"\bsleep\s+(\d+(?:\.\d+)?)", command)
    assert match, f"the preStop hook does not sleep: {command!r}"
    return float(match.group(1))


def check_drain_timing(deployment: Manifest, drain_timeout_s: float) -> None:
    """preStop sleep + drain + margin fit in the grace period, or the kubelet kills the
    worker with calls still draining."""
    sleep_s = prestop_sleep_s(deployment)
    assert sleep_s > 0, "preStop must sleep so the ingress drops the pod before the drain"
    grace = deployment["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
    needed = sleep_s + drain_timeout_s + SHUTDOWN_MARGIN_S
    assert grace >= needed, (
        f"terminationGracePeriodSeconds {grace} < preStop {sleep_s:g} + drain "
        f"{drain_timeout_s:g} + margin {SHUTDOWN_MARGIN_S:g}"
    )


def _seconds(value: Any) -> float:
    return float(str(value).removesuffix("s"))


def voice_ingress(objects: list[Manifest]) -> Manifest:
    """The Ingress that routes the native protocol (``/v1/voice``)."""
    for ingress in find(objects, "Ingress"):
        for rule in ingress["spec"].get("rules", []):
            for path in rule.get("http", {}).get("paths", []):
                if path["path"] == "/v1/voice":
                    return ingress
    raise AssertionError("no Ingress routes /v1/voice")


def check_ingress(objects: list[Manifest], max_call_s: float) -> None:
    hashed = voice_ingress(objects)["metadata"].get("annotations", {})
    assert hashed.get(HASH_ANNOTATION) == "$arg_session_id", (
        f"/v1/voice must hash on the session id, not {hashed.get(HASH_ANNOTATION)!r}"
    )
    for ingress in find(objects, "Ingress"):  # every transport is a call-long WebSocket
        name, notes = ingress["metadata"]["name"], ingress["metadata"].get("annotations", {})
        for timeout in ("proxy-read-timeout", "proxy-send-timeout"):
            value = notes.get(NGINX + timeout)
            assert value is not None, f"Ingress {name} leaves {timeout} at 60 s"
            assert _seconds(value) >= max_call_s, f"Ingress {name}: {timeout} {value} < a call"
        assert notes.get(NGINX + "proxy-buffering") == "off", f"Ingress {name} buffers audio"
        # service-upstream would balance through the ClusterIP, breaking the hash.
        assert notes.get(NGINX + "service-upstream", "false") != "true", name


def check_ports(objects: list[Manifest]) -> None:
    """Ingress -> Service port -> targetPort -> the container port the server listens on."""
    deployment = worker(objects)
    c = container(deployment)
    by_name = {p["name"]: p["containerPort"] for p in c["ports"] if "name" in p}
    numbers = {p["containerPort"] for p in c["ports"]}
    command = [str(word) for word in c.get("command", []) + c.get("args", [])]
    assert "--port" in command, "the worker's command does not name its port"
    listen = int(command[command.index("--port") + 1])
    assert listen in numbers, f"the server listens on {listen}, the container port is {numbers}"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    services = {s["metadata"]["name"]: s for s in find(objects, "Service")}
    for name, service in services.items():
        selector = service["spec"].get("selector", {})
        if selector.get("app.kubernetes.io/name") != "voxpipe":
            continue  # Redis
        assert selector.items() <= labels.items(), f"Service {name} selects no worker pod"
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            resolved = by_name.get(target) if isinstance(target, str) else target
            assert resolved == listen, f"Service {name} targets {target!r}, not {listen}"
    for ingress in find(objects, "Ingress"):
        for rule in ingress["spec"].get("rules", []):
            for path in rule["http"]["paths"]:
                backend = path["backend"]["service"]
                assert backend["name"] in services, f"no Service {backend['name']}"
                ports = services[backend["name"]]["spec"]["ports"]
                wanted = backend["port"].get("name", backend["port"].get("number"))
                assert wanted in {p.get("name") for p in ports} | {p["port"] for p in ports}


def check_selectors(objects: list[Manifest]) -> None:
    labels = worker(objects)["spec"]["template"]["metadata"]["labels"]
    for pdb in find(objects, "PodDisruptionBudget"):
        assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert worker(objects)["spec"]["selector"]["matchLabels"].items() <= labels.items()


def check_kustomization(folder: Path, kustomization: Manifest) -> None:
    """Lists every manifest of its folder, and lists nothing that is not there."""
    listed = set(kustomization.get("resources", []))
    listed |= {p["path"] for p in kustomization.get("patches", []) if "path" in p}
    files = {p.name for p in folder.glob("*.yaml")} - {"kustomization.yaml"}
    missing = files - listed
    assert not missing, f"{folder.name}/kustomization.yaml does not list {sorted(missing)}"
    for entry in listed:
        assert (folder / entry).exists(), f"{folder.name}/kustomization.yaml lists {entry}"


# -- the manifests as they are --------------------------------------------------------------


def test_every_manifest_parses() -> None:
    paths = sorted(K8S.rglob("*.yaml"))
    assert {p.name for p in paths} >= {
        "kustomization.yaml",
        "configmap.yaml",
        "deployment.yaml",
        "service.yaml",
        "ingress.yaml",
        "redis.yaml",
        "pdb.yaml",
    }
    for path in paths:
        for doc in load(path):
            assert "apiVersion" in doc and "kind" in doc, f"{path.name}: not an object"


def test_configuration_keys_name_real_fields() -> None:
    check_env_names(env_names(bundle()))


def test_pods_run_the_shared_store(pod_config: Config) -> None:
    assert pod_config.store.backend == "redis"
    redis = one(bundle(), "Service", "redis")
    host_port = f"redis://{redis['metadata']['name']}:{redis['spec']['ports'][0]['port']}/"
    assert pod_config.store.redis_url.startswith(host_port)


def test_probes() -> None:
    check_probes(worker(bundle()))


def test_grace_period_covers_prestop_and_drain(pod_config: Config) -> None:
    check_drain_timing(worker(bundle()), pod_config.server.drain_timeout_s)
    check_drain_timing(worker(bundle()), Config().server.drain_timeout_s)


def test_ingress_hashes_on_the_session_and_outlasts_a_call(pod_config: Config) -> None:
    check_ingress(bundle(), max(pod_config.server.max_call_s, Config().server.max_call_s))


def test_ports_line_up() -> None:
    check_ports(bundle())


def test_selectors_match_the_workers() -> None:
    check_selectors(bundle())


def test_worker_id_is_the_pod_name() -> None:
    env = {v["name"]: v for v in container(worker(bundle())).get("env", [])}
    ref = env["VOXPIPE_SERVER__WORKER_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert ref == "metadata.name"


def test_autoscaler_targets_fewer_calls_than_admitted(pod_config: Config) -> None:
    for hpa in find(bundle(), "HorizontalPodAutoscaler"):
        assert hpa["spec"]["scaleTargetRef"]["name"] == "voxpipe"
        for metric in hpa["spec"]["metrics"]:
            assert metric["pods"]["metric"]["name"] == "voxpipe_calls"
            target = float(metric["pods"]["target"]["averageValue"])
            assert 0 < target < pod_config.limits.max_calls


def test_kustomizations_list_every_manifest() -> None:
    kustomizations = sorted(K8S.rglob("kustomization.yaml"))
    assert K8S / "kustomization.yaml" in kustomizations
    for path in kustomizations:
        check_kustomization(path.parent, load(path)[0])


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (its kustomize) not here")
def test_kustomize_builds_with_and_without_the_autoscaler(tmp_path: Path) -> None:
    def build(folder: Path) -> list[Manifest]:
        out = subprocess.run(
            ["kubectl", "kustomize", str(folder)], capture_output=True, text=True, check=False
        )
        assert out.returncode == 0, out.stderr
        return [doc for doc in yaml.safe_load_all(out.stdout) if doc]

    base = build(K8S)
    assert all(
        o["metadata"].get("namespace") == "voxpipe" for o in base if o["kind"] != "Namespace"
    )
    assert not find(base, "HorizontalPodAutoscaler")
    copy_dir = tmp_path / "k8s"
    shutil.copytree(K8S, copy_dir)
    with (copy_dir / "kustomization.yaml").open("a") as f:
        f.write("components:\n  - hpa\n")
    scaled = build(copy_dir)
    assert len(find(scaled, "HorizontalPodAutoscaler")) == 1
    assert "replicas" not in worker(scaled)["spec"], "the autoscaler must own replicas"


# -- each check fails on a broken manifest ---------------------------------------------------


def _set(path: str, value: Any) -> Callable[[list[Manifest]], None]:
    """Mutate the worker Deployment's container (``c.``) or pod spec (``pod.``)."""

    def mutate(objects: list[Manifest]) -> None:
        deployment = worker(objects)
        where, _, key = path.partition(".")
        target = container(deployment) if where == "c" else deployment["spec"]["template"]["spec"]
        *parents, last = key.split(".")
        for part in parents:
            target = target[part]
        target[last] = value

    return mutate


def _annotate(name: str, value: str | None) -> Callable[[list[Manifest]], None]:
    def mutate(objects: list[Manifest]) -> None:
        notes = voice_ingress(objects)["metadata"]["annotations"]
        if value is None:
            notes.pop(NGINX + name, None)
        else:
            notes[NGINX + name] = value

    return mutate


def _retarget(objects: list[Manifest]) -> None:
    one(objects, "Service", "voxpipe-voice")["spec"]["ports"][0]["targetPort"] = 8000


def _rename_env(objects: list[Manifest]) -> None:
    cm = one(objects, "ConfigMap", "voxpipe")["data"]
    cm["VOXPIPE_SERVER_DRAIN_TIMEOUT_S"] = cm.pop("VOXPIPE_SERVER__DRAIN_TIMEOUT_S")


BROKEN: dict[str, tuple[Callable[[list[Manifest]], None], Callable[[list[Manifest]], None]]] = {
    "readiness on /healthz": (
        _set("c.readinessProbe.httpGet.path", "/healthz"),
        lambda o: check_probes(worker(o)),
    ),
    "liveness on /readyz": (
        _set("c.livenessProbe.httpGet.path", "/readyz"),
        lambda o: check_probes(worker(o)),
    ),
    "a short startup probe": (
        _set("c.startupProbe.failureThreshold", 3),
        lambda o: check_probes(worker(o)),
    ),
    "grace shorter than the drain": (
        _set("pod.terminationGracePeriodSeconds", 30),
        lambda o: check_drain_timing(worker(o), Config().server.drain_timeout_s),
    ),
    "a preStop sleep eating the grace period": (
        _set("c.lifecycle.preStop.exec.command", ["sh", "-c", "sleep 45"]),
        lambda o: check_drain_timing(worker(o), Config().server.drain_timeout_s),
    ),
    "no preStop sleep": (
        _set("c.lifecycle", {}),
        lambda o: check_drain_timing(worker(o), Config().server.drain_timeout_s),
    ),
    "no session hash": (
        _annotate("upstream-hash-by", None),
        lambda o: check_ingress(o, Config().server.max_call_s),
    ),
    "a hash that changes per connection": (
        _annotate("upstream-hash-by", "$request_id"),
        lambda o: check_ingress(o, Config().server.max_call_s),
    ),
    "a read timeout shorter than a call": (
        _annotate("proxy-read-timeout", "60"),
        lambda o: check_ingress(o, Config().server.max_call_s),
    ),
    "balancing through the ClusterIP": (
        _annotate("service-upstream", "true"),
        lambda o: check_ingress(o, Config().server.max_call_s),
    ),
    "a Service aimed at the wrong port": (_retarget, check_ports),
    "the server listening elsewhere": (
        _set("c.command", ["voxpipe", "serve", "--host", "0.0.0.0", "--port", "9000"]),
        check_ports,
    ),
    "a misspelt configuration key": (_rename_env, lambda o: check_env_names(env_names(o))),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_checks_catch_a_broken_manifest(case: str) -> None:
    mutate, check = BROKEN[case]
    objects = copy.deepcopy(bundle())
    check(objects)  # the real manifests pass ...
    mutate(objects)
    with pytest.raises(AssertionError):
        check(objects)  # ... and the broken copy does not


def test_kustomization_check_catches_an_unlisted_file() -> None:
    kustomization = load(K8S / "kustomization.yaml")[0]
    kustomization["resources"] = [r for r in kustomization["resources"] if r != "pdb.yaml"]
    with pytest.raises(AssertionError, match=r"pdb\.yaml"):
        check_kustomization(K8S, kustomization)
