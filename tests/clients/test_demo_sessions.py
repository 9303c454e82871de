"""A Claude Code and a Codex session against the simulated upstream, with each client's whole
default tool list (as against `thinkproxy demo --keep`): the simulated model calls the one
harmless tool (the shell, with `echo`; never Claude Code's `Agent`, which it offers first), then
answers the tool's result, and the session ends (proxy.mock.tool_choice). Claude Code once ran
1,672 requests in four minutes against the demo, the model calling `Agent` again and again."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.clients.conftest import MODEL, Proxy, Upstream
from tests.clients.test_claude_code import QUIET, claude, result_of  # noqa: F401  (claude: a fixture)
from tests.clients.test_codex_cli import codex_exec, events_of

pytestmark = pytest.mark.spawns

PROMPT = "What is in this project?"
ECHOED = "echo 'What is in this project'"  # (the echo keeps only [A-Za-z0-9 .,:-])


def test_a_claude_code_session_with_its_default_tools_ends_after_one_echo(
    claude: Path,  # noqa: F811
    proxy_state_off: Proxy,
    upstream: Upstream,
    tmp_path: Path,
) -> None:
    home, workdir = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}
    env |= {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": proxy_state_off.url,
        "ANTHROPIC_API_KEY": "sk-test",
        "ANTHROPIC_MODEL": MODEL,
        **QUIET,
    }
    if os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"
    # Its default tools (Agent first); Bash allowed so that the echo runs without a prompt.
    argv = [str(claude), "-p", PROMPT, "--output-format", "json", "--max-turns", "6"]
    argv += ["--allowedTools", "Bash", "--no-session-persistence"]
    done = subprocess.run(
        argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180
    )
    report = f"exit {done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}\n"
    assert done.returncode == 0, report + upstream.describe()
    result = result_of(done.stdout)
    assert result["subtype"] == "success" and result["num_turns"] == 2, report
    assert result["result"].startswith("The Bash tool returned:"), report
    chats = upstream.chat_requests()
    assert len(chats) == 2, upstream.describe()  # the call, then its result: the session ended
    offered = [t["function"]["name"] for t in chats[0]["tools"]]
    assert "Agent" in offered or "Task" in offered, offered  # (offered, and not called)
    (call,) = chats[1]["messages"][-2]["tool_calls"]
    assert call["function"]["name"] == "Bash"
    assert json.loads(call["function"]["arguments"])["command"] == ECHOED


def test_a_codex_session_with_its_default_tools_ends_after_one_echo(
    node: str, proxy_state_off: Proxy, upstream: Upstream, tmp_path: Path
) -> None:
    home, workdir = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    workdir.mkdir()
    done = codex_exec(node, proxy_state_off, home, workdir, PROMPT)
    report = f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr[-3000:]}\n"
    assert done.returncode == 0, report + upstream.describe()
    events = events_of(done.stdout)
    assert "turn.completed" in [e["type"] for e in events], report
    ran = [
        e["item"]
        for e in events
        if e["type"] == "item.completed" and e["item"]["type"] == "command_execution"
    ]
    assert len(ran) == 1 and ran[0]["exit_code"] == 0 and "echo" in ran[0]["command"], report
    chats = upstream.chat_requests()
    assert len(chats) == 2, upstream.describe()
    (call,) = chats[1]["messages"][-2]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"cmd": ECHOED}
