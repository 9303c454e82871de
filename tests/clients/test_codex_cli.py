"""Codex CLI (`@openai/codex` from npm, pinned in tests/clients/node) through the proxy: `codex exec`
with a `model_providers` entry pointing at the proxy, one shell-tool turn on the simulated DeepSeek,
whose mock refuses a tool result whose assistant turn lost its `reasoning_content`. The proxy runs
with `THINKPROXY_STATE=off`, so the reasoning can only come back through the sealed
`encrypted_content` that Codex echoes (Codex sends `store: false` and the whole history)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from proxy.server.serving import BackgroundServer
from tests.clients.conftest import (
    API_KEY,
    MODEL,
    NODE_DIR,
    Proxy,
    Upstream,
    assert_reasoning_replayed,
    start_proxy,
    stop_proxy,
)

pytestmark = pytest.mark.spawns

CODEX = NODE_DIR / "node_modules" / "@openai" / "codex" / "bin" / "codex.js"
# The simulated model calls the first tool (Codex's `exec_command`), filling its one required
# argument, `cmd`, with the user's words (at most 60 characters): the prompt is the command.
COMMAND = "echo codex-ran > proof.txt"
CONFIG = """\
model = "{model}"
model_provider = "thinkproxy"

[model_providers.thinkproxy]
name = "thinkproxy"
base_url = "{base}"
env_key = "THINKPROXY_TEST_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
stream_idle_timeout_ms = 60000
supports_websockets = {websockets}
"""
# Codex's own warning for a model it has no metadata for: not a failure.
METADATA_WARNING = "Model metadata for"


def codex_exec(
    node: str,
    proxy: Proxy,
    home: Path,
    workdir: Path,
    prompt: str,
    websockets: bool = False,
    model: str = MODEL,
) -> subprocess.CompletedProcess[str]:
    """One non-interactive `codex exec` turn, JSONL events on stdout, bounded in time."""
    config = CONFIG.format(model=model, base=proxy.base, websockets=str(websockets).lower())
    (home / "config.toml").write_text(config)
    argv = [node, str(CODEX), "exec", "--json", "--ephemeral", "--skip-git-repo-check"]
    # No sandbox: the command is the test's own (above), run in the test's temporary directory.
    argv += ["--sandbox", "danger-full-access", "--cd", str(workdir), prompt]
    env = {**os.environ, "CODEX_HOME": str(home), "HOME": str(home), "THINKPROXY_TEST_KEY": API_KEY}
    return subprocess.run(
        argv,
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def events_of(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_codex_exec_runs_a_shell_tool_turn_with_reasoning_replayed_through_the_seal(
    node: str, proxy_state_off: Proxy, upstream: Upstream, tmp_path: Path
) -> None:
    home, workdir = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    workdir.mkdir()

    done = codex_exec(node, proxy_state_off, home, workdir, COMMAND)

    report = f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}\nupstream:\n"
    assert done.returncode == 0, report + upstream.describe()
    events = events_of(done.stdout)
    kinds = [e["type"] for e in events]
    assert "turn.completed" in kinds and "turn.failed" not in kinds, report
    # The shell tool really ran, in the work directory.
    assert (workdir / "proof.txt").read_text().strip() == "codex-ran", report
    ran = [
        e["item"]
        for e in events
        if e["type"] == "item.completed" and e["item"]["type"] == "command_execution"
    ]
    assert len(ran) == 1 and ran[0]["exit_code"] == 0 and "proof.txt" in ran[0]["command"], report

    chats = upstream.chat_requests()
    assert_reasoning_replayed(chats, upstream.describe)
    # Its result went back upstream as the tool message answering the call.
    (call,) = chats[1]["messages"][-2]["tool_calls"]
    assert call["function"]["name"] == "exec_command"
    assert json.loads(call["function"]["arguments"]) == {"cmd": COMMAND}
    result = chats[1]["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == call["id"]
    assert "exited with code 0" in result["content"], result
    # The final answer (the simulated model quotes the tool's result) reached Codex.
    said = [
        e["item"]["text"]
        for e in events
        if e["type"] == "item.completed" and e["item"]["type"] == "agent_message"
    ]
    assert said and "exec_command tool returned" in said[-1], report


def test_codex_with_a_suffixed_model_gets_its_level(
    node: str, proxy_state_off: Proxy, upstream: Upstream, tmp_path: Path
) -> None:
    """`model = "deepseek-v4-pro(deep)"` in config.toml: Codex sends no effort for a model it does
    not know, so without the suffix no level applies; with it, every request of the tool loop
    reaches DeepSeek at deep, under the model's own name (docs/responses.md)."""
    home, workdir = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    workdir.mkdir()

    done = codex_exec(node, proxy_state_off, home, workdir, COMMAND, model=f"{MODEL}(deep)")

    report = f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}\nupstream:\n"
    assert done.returncode == 0, report + upstream.describe()
    assert (workdir / "proof.txt").read_text().strip() == "codex-ran", report
    chats = upstream.chat_requests()
    assert len(chats) >= 2, upstream.describe()  # the call, then its result
    for chat in chats:
        assert chat["model"] == MODEL, chat["model"]
        assert chat["thinking"] == {"type": "enabled"} and chat["reasoning_effort"] == "max", chat
    assert_reasoning_replayed(chats, upstream.describe)


def test_codex_runs_a_shell_tool_turn_over_the_socket_without_falling_back_to_http(
    node: str, mock: BackgroundServer, tmp_path: Path
) -> None:
    """Codex CLI with `supports_websockets = true`: its warm-up (`generate: false`) and both turns
        of a shell-tool loop go over one socket (the access lines say `WS`, none `POST`), and DeepSeek's
        replay rule holds with the state store off (the reasoning comes back in the sealed blobs). (Before
    the door had a WebSocket mode, Codex fell back to HTTP after a 426.)"""
    log = Upstream(mock)
    log.clear()
    proxy = start_proxy(mock, tmp_path, THINKPROXY_STATE="off", THINKPROXY_LOG_LEVEL="info")
    try:
        home, workdir = tmp_path / "codex-home", tmp_path / "work"
        home.mkdir()
        workdir.mkdir()
        done = codex_exec(node, proxy, home, workdir, COMMAND, websockets=True)
    finally:
        stop_proxy(proxy)
    report = f"exit {done.returncode}\nstderr:\n{done.stderr[-3000:]}\nproxy:\n{proxy.output()[-3000:]}"
    assert done.returncode == 0, report
    assert (workdir / "proof.txt").read_text().strip() == "codex-ran", report
    events = events_of(done.stdout)
    errors = [e.get("message") or e.get("item", {}).get("message", "") for e in events if is_error(e)]
    assert [m for m in errors if METADATA_WARNING not in m] == [], report  # no reconnect, no fallback
    lines = [line for line in proxy.output().splitlines() if "path=/v1/responses" in line]
    turns = [line for line in lines if "method=WS" in line]
    assert len(turns) >= 2 and not [line for line in lines if "method=POST" in line], report
    assert any("method=GET" in line and "status=101" in line for line in lines), report
    assert_reasoning_replayed(log.chat_requests(), log.describe)


def is_error(event: dict[str, Any]) -> bool:
    return event["type"] == "error" or (
        event["type"] == "item.completed" and event["item"]["type"] == "error"
    )
