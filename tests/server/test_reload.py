"""proxy.server.reload: a SIGHUP reload swaps in a file only when the whole of it checks out; a bad
one (wrong bytes, an alias bomb, several faults) keeps the one in use and is one log line."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from proxy.core.controls import Level
from proxy.server.app import create_app, load_routes
from proxy.server.reload import reload_files
from tests.helpers import laughs, make_settings

POLICY = "keys:\n  alice: {max_level: standard}\n"


def proxy_app(policy_file: Path) -> Any:
    settings = make_settings(
        upstream_base_url="http://127.0.0.1:9/v1",
        upstream_api_key="sk-operator",
        client_keys=["alice:ck-alice"],
        policy_file=policy_file,
    )
    return create_app(settings)


def refused_reload(app: Any, caplog: pytest.LogCaptureFixture) -> str:
    """Reload: nothing is swapped in, alice keeps `standard`, and the log says why in one line."""
    services = app.state.services
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="thinkproxy.reload"):
        assert reload_files(app.state.proxy, services.thinking, load_routes) == []
    assert services.thinking.policy.rule_for("alice").max_level is Level.STANDARD
    (record,) = caplog.records
    message = record.getMessage()
    assert "\n" not in message
    assert message.startswith("SIGHUP: the policy file was not reloaded, the one in use stays: ")
    return message


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"keys:\n  alice: {max_level: d\xe9ep}\n", "policy.yaml: not UTF-8: byte 28 (0xe9, line 2)"),
        ((POLICY + laughs(9)).encode(), "policy.yaml:11: refused: its aliases would add 1,234,567,880 nodes"),
        (b"keys:\n  alice: {max_level: deep\n", "policy.yaml: not valid YAML: "),
    ],
    ids=["not-utf8", "alias-bomb", "syntax"],
)
def test_a_bad_policy_file_keeps_the_one_in_use_and_logs_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, said: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    app = proxy_app(path)
    path.write_bytes(content)
    assert said in refused_reload(app, caplog)


def test_several_faults_are_still_one_log_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    app = proxy_app(path)
    path.write_text("default: {max_level: huge}\nkeys:\n  alice: {max_level: high}\n")
    message = refused_reload(app, caplog)
    assert "policy.yaml:1: default.max_level: 'huge' is not a level" in message
    assert "policy.yaml:3: keys.alice.max_level: 'high' is not a level" in message


def test_a_good_file_is_taken(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    app = proxy_app(path)
    path.write_text("keys:\n  alice: {max_level: 'off'}\n")
    assert reload_files(app.state.proxy, app.state.services.thinking, load_routes) == [f"policy ({path})"]
    assert app.state.services.thinking.policy.rule_for("alice").max_level is Level.OFF
