"""The thinking policy end to end: a gateway with named client keys and a policy file in front of
the simulated DeepSeek, which reports reasoning tokens in its usage. Ceilings are announced in the
headers and the trace, a spent budget is a 429 with Retry-After (or thinking off, said so), the
usage report is for admin keys only, and SIGHUP's reload keeps the running policy when the new
file is bad."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from proxy.core.controls import Level
from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app, load_routes
from proxy.server.reload import reload_files
from proxy.server.serving import BackgroundServer
from tests.helpers import laughs, make_settings, simulated_providers_file, start_serve

POLICY = """\
default: {max_level: deep}
keys:
  alice: {max_level: standard}
  bob: {reasoning_tokens: {limit: 1, per: hour}}
  carol: {reasoning_tokens: {limit: 1, per: day}, on_exhausted: "off"}
prices:
  "deepseek-*": {input: 0.27, output: 1.10, cached_input: 0.07}
"""
SCHEMA = jsonschema.Draft202012Validator(
    json.loads((Path(__file__).parents[2] / "docs" / "trace-event.schema.json").read_text())
)
KEYS = ["alice:ck-alice", "bob:ck-bob", "carol:ck-carol"]
ASK = {"model": "deepseek-v4-pro", "messages": [{"role": "user", "content": "Why is the sky blue?"}]}


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions())) as server:
        yield server


def gateway(mock: BackgroundServer, policy_file: Path) -> tuple[BackgroundServer, Any]:
    settings = make_settings(
        upstream_base_url=f"{mock.url}/deepseek/v1",
        upstream_api_key="sk-operator",
        client_keys=KEYS,
        admin_keys=["ops:ak-ops"],
        policy_file=policy_file,
        trace="brief",
    )
    app = create_app(settings, table=simulated_table(mock.port))
    return BackgroundServer(app), app


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return path


def ask(
    proxy: BackgroundServer, key: str, level: str | None = "deep", stream: bool = False
) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    if level:
        headers["x-thinking-level"] = level
    return httpx.post(
        f"{proxy.url}/v1/chat/completions", json={**ASK, "stream": stream}, headers=headers, timeout=20
    )


def sent_thinking(mock: BackgroundServer) -> Any:
    return httpx.get(f"{mock.url}/_mock/requests/last").json()["body"].get("thinking")


def test_a_level_above_the_ceiling_is_sent_at_the_ceiling_and_said_so(
    mock: BackgroundServer, policy_file: Path
) -> None:
    proxy, _ = gateway(mock, policy_file)
    with proxy:
        r = ask(proxy, "ck-alice", "deep")
        assert r.status_code == 200
        assert r.headers["x-thinking-policy"] == "max_level=standard"
        assert r.headers["x-thinking-level-applied"] == "standard"
        streamed = ask(proxy, "ck-alice", "deep", stream=True)
        untouched = ask(proxy, "ck-bob", "deep")
    notes = [
        json.loads(line[len(": trace ") :]) for line in streamed.text.splitlines() if '"type":"note"' in line
    ]
    assert [n["code"] for n in notes] == ["thinking_policy"] and notes[0]["rule"] == "max_level=standard"
    assert notes[0]["message"] == "Thinking policy max_level=standard: asked deep, sent standard"
    SCHEMA.validate(notes[0])
    assert "x-thinking-policy" not in untouched.headers
    assert untouched.headers["x-thinking-level-applied"] == "deep"


def test_a_spent_budget_is_a_429_with_retry_after(mock: BackgroundServer, policy_file: Path) -> None:
    proxy, _ = gateway(mock, policy_file)
    with proxy:
        first = ask(proxy, "ck-bob")
        assert (
            first.status_code == 200
            and first.json()["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0
        )
        refused = ask(proxy, "ck-bob")
        other = ask(proxy, "ck-alice")
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["type"] == error["code"] == "reasoning_budget_exceeded" and "'bob'" in error["message"]
    assert 0 < int(refused.headers["retry-after"]) <= 3600
    assert refused.headers["x-thinking-policy"] == "reasoning_tokens=1/hour; on_exhausted=refuse"
    assert other.status_code == 200


def test_a_spent_budget_with_off_sends_thinking_off(mock: BackgroundServer, policy_file: Path) -> None:
    proxy, _ = gateway(mock, policy_file)
    with proxy:
        assert ask(proxy, "ck-carol", "deep").status_code == 200
        assert sent_thinking(mock) == {"type": "enabled"}
        r = ask(proxy, "ck-carol", "deep")
    assert r.status_code == 200 and sent_thinking(mock) == {"type": "disabled"}
    assert r.headers["x-thinking-level-applied"] == "off"
    assert r.headers["x-thinking-policy"] == "reasoning_tokens=1/day; on_exhausted=off"


def test_the_usage_report_is_for_admin_keys(mock: BackgroundServer, policy_file: Path) -> None:
    proxy, _ = gateway(mock, policy_file)
    with proxy:
        ask(proxy, "ck-bob")
        ask(proxy, "ck-alice")
        url = f"{proxy.url}/thinkproxy/usage"
        assert httpx.get(url).status_code == 401
        assert httpx.get(url, headers={"authorization": "Bearer ck-alice"}).status_code == 401
        report = httpx.get(url, headers={"authorization": "Bearer ak-ops"}).json()
    bob = report["clients"]["bob"]
    assert bob["requests"] == 1 and bob["reasoning_tokens"] > 0 and bob["cost_usd"] > 0
    assert bob["budget"]["limit"] == 1 and bob["budget"]["left"] == 0
    assert (
        report["clients"]["alice"]["max_level"] == "standard" and report["clients"]["alice"]["budget"] is None
    )
    assert report["clients"]["carol"]["requests"] == 0
    assert {row["client"] for row in report["by_model"]} == {"alice", "bob"}
    assert report["budget_store"] == {"name": "memory", "errors": 0}


def test_the_console_lists_each_requests_cost(mock: BackgroundServer, policy_file: Path) -> None:
    settings = make_settings(
        upstream_base_url=f"{mock.url}/deepseek/v1",
        upstream_api_key="sk-operator",
        client_keys=KEYS,
        admin_keys=["ops:ak-ops"],
        policy_file=policy_file,
        ui=True,
    )
    with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as proxy:
        assert ask(proxy, "ck-alice").status_code == 200
        admin = {"authorization": "Bearer ak-ops"}
        [listed] = httpx.get(f"{proxy.url}/thinkproxy/requests", headers=admin).json()["data"]
        report = httpx.get(f"{proxy.url}/thinkproxy/usage", headers=admin).json()
    assert listed["client"] == "alice" and listed["cost_usd"] > 0
    assert listed["cost_usd"] == pytest.approx(
        report["clients"]["alice"]["cost_usd"], abs=1e-6
    )  # (rounded there)


def test_a_reload_takes_a_good_file_and_keeps_the_old_one_for_a_bad_one(
    mock: BackgroundServer, policy_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proxy, app = gateway(mock, policy_file)
    services = app.state.services
    with proxy:
        policy_file.write_text(POLICY.replace("alice: {max_level: standard}", "alice: {max_level: 'off'}"))
        handler = app.state.proxy
        assert reload_files(handler, services.thinking, load_routes) == [f"policy ({policy_file})"]
        assert ask(proxy, "ck-alice", "deep").headers["x-thinking-level-applied"] == "off"
        policy_file.write_text("keys:\n  alice: {max_level: high}\n")
        assert reload_files(handler, services.thinking, load_routes) == []
        assert "policy.yaml:2: keys.alice.max_level: 'high' is not a level" in caplog.text
        assert services.thinking.policy.rule_for("alice").max_level is Level.OFF


def test_a_policy_needs_named_client_keys(tmp_path: Path, policy_file: Path) -> None:
    from proxy.core.errors import ConfigError

    with pytest.raises(ConfigError, match="THINKPROXY_POLICY_FILE needs gateway mode"):
        create_app(make_settings(policy_file=policy_file))
    with pytest.raises(ConfigError, match="has no name"):
        create_app(make_settings(policy_file=policy_file, client_keys=["ck-1"], upstream_api_key="sk"))


def test_sighup_reloads_a_running_serve(mock: BackgroundServer, policy_file: Path, tmp_path: Path) -> None:
    """A real `thinkproxy serve` and a real SIGHUP: the new ceiling applies, a bad file is refused in
    the log and the old one stays, and the process keeps serving."""
    providers = simulated_providers_file(tmp_path, mock.port)
    server, base = start_serve(
        mock,
        "--providers",
        str(providers),
        THINKPROXY_CLIENT_KEYS=",".join(KEYS),
        THINKPROXY_UPSTREAM_API_KEY="sk-operator",
        THINKPROXY_POLICY_FILE=str(policy_file),
        THINKPROXY_STATE="off",
    )
    headers = {"authorization": "Bearer ck-alice", "x-thinking-level": "deep"}
    lines: list[str] = []
    assert server.stdout is not None
    stdout = server.stdout

    def read() -> None:
        lines.extend(line.decode(errors="replace") for line in stdout)

    reader = threading.Thread(target=read)
    reader.start()

    def applied() -> str:
        r = httpx.post(f"{base}/v1/chat/completions", json=ASK, headers=headers, timeout=20)
        assert r.status_code == 200, r.text
        return r.headers["x-thinking-level-applied"]

    def hup_and_wait_for(check: Callable[[], bool], what: str) -> None:
        server.send_signal(signal.SIGHUP)
        for _ in range(400):  # (bounded: the handler runs on the server's next loop turn)
            if check():
                return
            threading.Event().wait(0.025)
        pytest.fail(f"after SIGHUP, never: {what}")

    try:
        assert applied() == "standard"
        policy_file.write_text(POLICY.replace("alice: {max_level: standard}", "alice: {max_level: deep}"))
        hup_and_wait_for(lambda: applied() == "deep", "deep applied")
        policy_file.write_text("keys:\n  alice: {max_level: high}\n")
        hup_and_wait_for(lambda: any("was not reloaded" in line for line in lines), "the refusal logged")
        assert applied() == "deep"  # the one in use stays
        policy_file.write_text(POLICY + laughs(9))  # an alias bomb: a billion nodes once expanded
        hup_and_wait_for(lambda: sum("was not reloaded" in line for line in lines) == 2, "the bomb refused")
        assert applied() == "deep" and server.poll() is None
        policy_file.write_text(POLICY)
        hup_and_wait_for(lambda: applied() == "standard", "standard applied")
        assert server.poll() is None
    finally:
        server.terminate()
        server.wait(timeout=20)
        reader.join(timeout=20)
        stdout.close()
    refusal, bomb = (line for line in lines if "was not reloaded" in line)
    assert "the policy file was not reloaded, the one in use stays" in refusal
    assert "keys.alice.max_level: 'high' is not a level" in refusal
    assert "policy.yaml:16: refused: its aliases would add 1,234,567,880 nodes" in bomb
