"""docs/observability.md and the Grafana dashboard name exactly the metrics the proxy serves."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
from starlette.testclient import TestClient

from proxy.server.app import create_app
from tests.helpers import make_settings

DOCS = Path(__file__).parent.parent / "docs"
METRIC = re.compile(r"\b((?:thinkproxy|gen_ai_client)_[a-z_]+?)(?:_bucket|_sum|_count)?\b")


def served_metrics() -> set[str]:
    with TestClient(create_app(make_settings())) as client:
        text = client.get("/metrics").text
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}


def dashboard_exprs() -> list[str]:
    dashboard = orjson.loads((DOCS / "grafana-dashboard.json").read_bytes())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def doc_promql() -> list[str]:
    text = (DOCS / "observability.md").read_text()
    block = text.split("```promql\n", 1)[1].split("```", 1)[0]
    queries, current = [], ""
    for line in block.splitlines():
        if line.startswith("#") or not line.strip():
            if current:
                queries.append(current)
            current = ""
        else:
            current += " " + line.strip()
    return [*queries, current] if current else queries


def test_the_metrics_table_is_what_metrics_serves() -> None:
    text = (DOCS / "observability.md").read_text()
    table = set(re.findall(r"^\| `((?:thinkproxy|gen_ai_client)_[a-z_]+)` \|", text, re.M))
    served = served_metrics()
    assert table == served


def test_dashboard_and_examples_use_only_served_metrics() -> None:
    served = served_metrics()
    exprs = dashboard_exprs() + doc_promql()
    assert len(exprs) > 10
    used = {m for expr in exprs for m in METRIC.findall(expr)}
    assert used and used <= served, used - served
