"""deploy/: the compose file and Kubernetes manifests parse, name real settings, wire the replicas
to one password-protected Redis with probes on /healthz, validate against the Kubernetes API's
JSON schemas (offline: kubernetes-validate ships them), and every pod passes Pod Security
"restricted"; the Dockerfile builds behind a mirror."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
SETTINGS = {f"THINKPROXY_{name.upper()}" for name in Settings.model_fields}
# The oldest and the newest Kubernetes minor the manifests are checked against (schemas of
# kubernetes-validate; policy/v1, networking.k8s.io/v1 Ingress and NetworkPolicy are in both).
KUBERNETES_VERSIONS = ("1.29.0", "1.37.0")


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def manifests() -> list[dict[str, Any]]:
    return [m for path in sorted(KUBERNETES.glob("*.yaml")) for m in documents(path)]


def named(kind: str, name: str) -> dict[str, Any]:
    (found,) = [m for m in manifests() if m["kind"] == kind and m["metadata"]["name"] == name]
    return found


def pod_templates(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every pod spec the manifests would create: Pods and the templates of workload kinds."""
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        if kind == "Pod":
            yield f"{kind}/{name}", doc["spec"]
        elif kind == "CronJob":
            yield f"{kind}/{name}", doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        elif kind in {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}:
            yield f"{kind}/{name}", doc["spec"]["template"]["spec"]


# Pod Security Standards, "restricted" profile (kubernetes.io/docs/concepts/security/pod-security-standards),
# which includes "baseline"; plus this project's own rule of a read-only root filesystem.
RESTRICTED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """What in one pod spec breaks Pod Security "restricted" (or a read-only root filesystem)."""
    problems: list[str] = []
    pod_sc = spec.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag):
            problems.append(f"{flag} is set")
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            problems.append(f"volume {volume['name']}: type {sorted(kinds - RESTRICTED_VOLUME_TYPES)}")
    if pod_sc.get("runAsUser") == 0:
        problems.append("pod runs as uid 0")
    if (pod_sc.get("seccompProfile") or {}).get("type") == "Unconfined":
        problems.append("pod seccompProfile Unconfined")
    if pod_sc.get("sysctls"):
        problems.append("pod sets sysctls")
    containers = [
        *(spec.get("initContainers") or []),
        *(spec.get("containers") or []),
        *(spec.get("ephemeralContainers") or []),
    ]
    if not containers:
        problems.append("no containers")
    for container in containers:
        where = f"container {container.get('name')}"
        sc = container.get("securityContext") or {}
        if sc.get("privileged"):
            problems.append(f"{where}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: allowPrivilegeEscalation is not false")
        capabilities = sc.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            problems.append(f"{where}: capabilities do not drop ALL")
        added = set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}  # the only one allowed
        if added:
            problems.append(f"{where}: adds capabilities {sorted(added)}")
        run_as_non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
        if run_as_non_root is not True:
            problems.append(f"{where}: runAsNonRoot is not true (pod or container)")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            problems.append(f"{where}: runs as uid 0")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in {"RuntimeDefault", "Localhost"}:
            problems.append(f"{where}: seccompProfile is {seccomp!r}, not RuntimeDefault or Localhost")
        if sc.get("procMount", "Default") != "Default":
            problems.append(f"{where}: procMount {sc['procMount']}")
        if any(port.get("hostPort") for port in container.get("ports") or []):
            problems.append(f"{where}: hostPort")
        if sc.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{where}: root filesystem is writable")
    return problems


# --- compose ---------------------------------------------------------------------------------


def test_compose_runs_replicas_behind_a_load_balancer_sharing_redis() -> None:
    (compose,) = documents(DEPLOY / "compose.yaml")
    services = compose["services"]
    proxy = services["thinkproxy"]
    assert proxy["deploy"]["replicas"] > 1
    env = proxy["environment"]
    assert set(env) <= SETTINGS
    assert re.fullmatch(r"redis://:\$\{REDIS_PASSWORD:\?[^}$]*\}@redis:6379/0", env["THINKPROXY_STATE_URL"])
    assert "redis" in services and "lb" in services
    nginx = (DEPLOY / "nginx.conf").read_text(encoding="utf-8")
    assert "proxy_buffering off" in nginx and "server thinkproxy:8080" in nginx


def test_compose_publishes_on_loopback_and_starts_once_redis_is_healthy() -> None:
    (compose,) = documents(DEPLOY / "compose.yaml")
    services = compose["services"]
    # Only the load balancer is published, on 127.0.0.1 unless the operator says otherwise.
    published = {name: s["ports"] for name, s in services.items() if s.get("ports")}
    assert published == {"lb": ["${THINKPROXY_PUBLISH:-127.0.0.1:8080}:80"]}
    assert services["thinkproxy"]["depends_on"] == {"redis": {"condition": "service_healthy"}}
    redis = services["redis"]
    assert "--requirepass" in " ".join(redis["command"])
    assert redis["environment"]["REDIS_PASSWORD"].startswith("${REDIS_PASSWORD:?")
    assert "redis-cli ping" in " ".join(redis["healthcheck"]["test"])
    assert redis["environment"]["REDISCLI_AUTH"].startswith("${REDIS_PASSWORD:?")
    # compose interpolates ${…} everywhere: a literal $( … ) in a value would be an invalid template
    assert "$(" not in (DEPLOY / "compose.yaml").read_text().split("name: thinkproxy", 1)[1]


# --- Kubernetes --------------------------------------------------------------------------------


def test_kubernetes_deployment_has_probes_config_map_and_redis() -> None:
    kinds = {(m["kind"], m["metadata"]["name"]) for m in manifests()}
    assert {("Deployment", "thinkproxy"), ("Service", "thinkproxy")} <= kinds
    assert {("Deployment", "thinkproxy-redis"), ("Service", "thinkproxy-redis")} <= kinds
    deployment = named("Deployment", "thinkproxy")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    env = {e["name"]: e for e in container["env"]}
    assert set(env) - {"REDIS_PASSWORD"} <= SETTINGS
    assert env["THINKPROXY_PROVIDERS_FILE"]["value"].startswith("/etc/thinkproxy/")
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["providers"]["configMap"]["name"] == "thinkproxy-providers"
    assert deployment["spec"]["replicas"] > 1


def test_redis_requires_the_password_the_proxy_sends() -> None:
    proxy = named("Deployment", "thinkproxy")["spec"]["template"]["spec"]
    (container,) = proxy["containers"]
    names = [e["name"] for e in container["env"]]
    env = {e["name"]: e for e in container["env"]}
    secret = env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert env["THINKPROXY_STATE_URL"]["value"] == "redis://:$(REDIS_PASSWORD)@thinkproxy-redis:6379/0"
    # Kubernetes expands $(VAR) only from variables defined earlier in the list
    assert names.index("REDIS_PASSWORD") < names.index("THINKPROXY_STATE_URL")

    redis = named("Deployment", "thinkproxy-redis")["spec"]["template"]["spec"]
    (server,) = redis["containers"]
    redis_env = {e["name"]: e for e in server["env"]}
    args = server["args"]
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    assert redis_env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == secret
    # the readiness probe authenticates (redis-cli reads REDISCLI_AUTH) and needs a PONG
    assert redis_env["REDISCLI_AUTH"]["valueFrom"]["secretKeyRef"] == secret
    assert "PONG" in " ".join(server["readinessProbe"]["exec"]["command"])
    # the command that creates the secret is given where the manifests are applied
    header = (KUBERNETES / "thinkproxy.yaml").read_text(encoding="utf-8")
    assert f"kubectl create secret generic {secret['name']} --from-literal={secret['key']}=" in header


def test_only_the_proxy_may_reach_redis() -> None:
    policy = named("NetworkPolicy", "thinkproxy-redis")["spec"]
    redis = named("Deployment", "thinkproxy-redis")
    proxy = named("Deployment", "thinkproxy")
    assert policy["podSelector"]["matchLabels"] == redis["spec"]["template"]["metadata"]["labels"]
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    (source,) = rule["from"]
    assert set(source) == {"podSelector"}  # no namespaceSelector or ipBlock widening it
    assert source["podSelector"]["matchLabels"] == proxy["spec"]["template"]["metadata"]["labels"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 6379}]


def test_every_pod_passes_pod_security_restricted() -> None:
    templates = dict(pod_templates(manifests()))
    assert set(templates) == {"Deployment/thinkproxy", "Deployment/thinkproxy-redis"}
    for name, spec in templates.items():
        assert restricted_violations(spec) == [], name
        assert spec["automountServiceAccountToken"] is False, name


def test_the_restricted_check_catches_each_rule() -> None:
    spec = named("Deployment", "thinkproxy")["spec"]["template"]["spec"]
    assert restricted_violations(spec) == []
    breaks = {
        "allowPrivilegeEscalation": lambda s: s["containers"][0]["securityContext"].pop(
            "allowPrivilegeEscalation"
        ),
        "drop ALL": lambda s: s["containers"][0]["securityContext"]["capabilities"].update(drop=[]),
        "capabilities [": lambda s: s["containers"][0]["securityContext"]["capabilities"].update(
            add=["NET_ADMIN"]
        ),
        "seccompProfile": lambda s: s["securityContext"].pop("seccompProfile"),
        "runAsNonRoot": lambda s: s["securityContext"].pop("runAsNonRoot"),
        "uid 0": lambda s: s["securityContext"].update(runAsUser=0),
        "root filesystem": lambda s: s["containers"][0]["securityContext"].pop("readOnlyRootFilesystem"),
        "hostPath": lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
        "privileged": lambda s: s["containers"][0]["securityContext"].update(privileged=True),
        "hostNetwork": lambda s: s.update(hostNetwork=True),
        "hostPort": lambda s: s["containers"][0]["ports"][0].update(hostPort=8080),
        "container init:": lambda s: s.update(initContainers=[{"name": "init", "image": "busybox"}]),
    }
    for expected, breaking in breaks.items():
        broken = copy.deepcopy(spec)
        breaking(broken)
        problems = restricted_violations(broken)
        assert any(expected in p for p in problems), (expected, problems)


def test_the_proxy_writes_only_to_an_empty_dir_at_tmp() -> None:
    spec = named("Deployment", "thinkproxy")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    # proxy.telemetry.multiprocess makes the workers' metrics directory with tempfile.mkdtemp
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    assert all(m.get("readOnly") for path, m in mounts.items() if path != "/tmp")
    redis = named("Deployment", "thinkproxy-redis")["spec"]["template"]["spec"]
    (server,) = redis["containers"]
    redis_volumes = {v["name"]: v for v in redis["volumes"]}
    assert all("emptyDir" in redis_volumes[m["name"]] for m in server["volumeMounts"])


def test_shutdown_waits_for_the_pre_stop_pause_and_in_flight_streams() -> None:
    spec = named("Deployment", "thinkproxy")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pause = int(command[1])
    env = {e["name"]: e.get("value") for e in container["env"]}
    default = Settings.model_fields["shutdown_timeout"].default
    shutdown = float(env.get("THINKPROXY_SHUTDOWN_TIMEOUT") or default)
    # the grace period covers the pause, then the streams' own shutdown timeout, with a margin
    assert pause >= 5
    assert spec["terminationGracePeriodSeconds"] >= pause + shutdown + 1
    assert spec["terminationGracePeriodSeconds"] <= pause + shutdown + 30


def test_a_disruption_budget_keeps_replicas_serving() -> None:
    budget = named("PodDisruptionBudget", "thinkproxy")
    deployment = named("Deployment", "thinkproxy")
    assert budget["apiVersion"] == "policy/v1"
    assert budget["spec"]["selector"]["matchLabels"] == deployment["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["maxUnavailable"] < deployment["spec"]["replicas"]


def test_the_ingress_streams_unbuffered_with_long_timeouts() -> None:
    ingress = named("Ingress", "thinkproxy")
    notes = ingress["metadata"]["annotations"]
    prefix = "nginx.ingress.kubernetes.io/"
    assert notes[prefix + "proxy-buffering"] == "off"
    assert notes[prefix + "proxy-request-buffering"] == "off"
    total = Settings.model_fields["total_timeout"].default
    assert int(notes[prefix + "proxy-read-timeout"]) >= total
    assert int(notes[prefix + "proxy-send-timeout"]) >= total
    (rule,) = ingress["spec"]["rules"]
    (path,) = rule["http"]["paths"]
    service = named("Service", path["backend"]["service"]["name"])
    assert path["backend"]["service"]["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_manifests_validate_against_the_kubernetes_schemas(version: str) -> None:
    """kubeconform's check, offline: the Kubernetes API's JSON schemas (strict: unknown fields are
    errors) as the pinned kubernetes-validate package ships them."""
    import kubernetes_validate

    docs = manifests()
    assert len(docs) >= 7
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
    # the check is real: a misspelled field or a wrong type fails it
    deployment = copy.deepcopy(named("Deployment", "thinkproxy"))
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesyst"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, version, strict=True)
    budget = copy.deepcopy(named("PodDisruptionBudget", "thinkproxy"))
    budget["spec"]["maxUnavailable"] = [1]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(budget, version, strict=True)


# --- Dockerfile ------------------------------------------------------------------------------


def test_the_dockerfile_builds_behind_a_mirror_or_from_a_wheel_directory() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    build, runtime = dockerfile.split("\nFROM ${BASE_IMAGE}\n")
    # pip reads PIP_* from the environment: the build arguments reach every pip of the build stage
    for arg in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_NO_INDEX"):
        assert re.search(rf"^ARG {arg}$", build, re.M), arg  # no default: unset unless given
    wheelhouse = re.search(r"^ARG WHEELHOUSE=(\S+)$", build, re.M)
    assert wheelhouse is not None
    default = ROOT / wheelhouse.group(1)
    assert default.is_dir()  # COPY needs it to exist; it is in the build context
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert not any(default.relative_to(ROOT).as_posix().startswith(p.rstrip("/")) for p in ignored)
    assert "COPY ${WHEELHOUSE} /wheelhouse" in build
    assert "--find-links /wheelhouse" in build
    # the runtime stage installs from the build stage's wheels only, never from an index
    assert "pip install --no-index --find-links /wheels thinkproxy" in runtime
    assert "ARG PIP_" not in runtime
