"""deploy/: the compose file and Kubernetes manifests parse, name real settings, and wire the
replicas to one Redis with probes on /healthz."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from proxy.settings import Settings

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
SETTINGS = {f"THINKPROXY_{name.upper()}" for name in Settings.model_fields}


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def test_compose_runs_replicas_behind_a_load_balancer_sharing_redis() -> None:
    (compose,) = documents(DEPLOY / "compose.yaml")
    services = compose["services"]
    proxy = services["thinkproxy"]
    assert proxy["deploy"]["replicas"] > 1
    env = proxy["environment"]
    assert set(env) <= SETTINGS
    assert env["THINKPROXY_STATE_URL"].startswith("redis://redis:")
    assert "redis" in services and "lb" in services
    nginx = (DEPLOY / "nginx.conf").read_text(encoding="utf-8")
    assert "proxy_buffering off" in nginx and "server thinkproxy:8080" in nginx


def test_kubernetes_deployment_has_probes_config_map_and_redis() -> None:
    manifests = documents(DEPLOY / "kubernetes" / "thinkproxy.yaml") + documents(
        DEPLOY / "kubernetes" / "redis.yaml"
    )
    kinds = {(m["kind"], m["metadata"]["name"]) for m in manifests}
    assert {("Deployment", "thinkproxy"), ("Service", "thinkproxy")} <= kinds
    assert {("Deployment", "thinkproxy-redis"), ("Service", "thinkproxy-redis")} <= kinds
    deployment = next(
        m for m in manifests if m["kind"] == "Deployment" and m["metadata"]["name"] == "thinkproxy"
    )
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    env = {e["name"]: e for e in container["env"]}
    assert set(env) <= SETTINGS
    assert env["THINKPROXY_STATE_URL"]["value"] == "redis://thinkproxy-redis:6379/0"
    assert env["THINKPROXY_PROVIDERS_FILE"]["value"].startswith("/etc/thinkproxy/")
    assert spec["volumes"][0]["configMap"]["name"] == "thinkproxy-providers"
    assert deployment["spec"]["replicas"] > 1
