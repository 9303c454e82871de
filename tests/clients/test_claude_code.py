"""Claude Code (`@anthropic-ai/claude-code` from npm, pinned in tests/clients/node) through the
Messages door: `claude -p` headless with `ANTHROPIC_BASE_URL` at a real `thinkproxy serve` in front
of the simulated DeepSeek, whose mock refuses a tool result whose assistant turn lost its
`reasoning_content`. The proxy runs with `THINKPROXY_STATE=off`: Claude Code asks for
`thinking: {type: adaptive, display: omitted}`, so it holds no thinking text, only the proxy's sealed
signature, and that signature is all that carries DeepSeek's reasoning to the second request.

What Claude Code 2.1.332 sends (docs/messages.md, "Claude Code"): `POST /v1/messages?beta=true`,
streamed, with `anthropic-beta` flags, `context_management`, `output_config.effort: high`,
`metadata.user_id`, cache_control on blocks, its environment as a mid-conversation `role: system`
message, `<system-reminder>` text before the prompt, and a `DeferredToolPlaceholder` tool with
`defer_loading: true` beside the tools it was given. With the quieting variables below it opens no
connection but the one to the proxy (checked with strace: without them it looks up api.anthropic.com).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.clients.conftest import (
    MODEL,
    NODE_DIR,
    Proxy,
    Upstream,
    assert_reasoning_replayed,
    missing_component,
)

pytestmark = pytest.mark.spawns

VERSION = "2.1.332"  # tests/clients/node/package.json pins it
# A native binary: the package's postinstall (allowed in package.json's allowScripts) puts the
# platform package's executable here.
CLAUDE = NODE_DIR / "node_modules" / "@anthropic-ai" / "claude-code" / "bin" / "claude.exe"
# The simulated model calls the first tool (Bash, the only one given), filling its one required
# argument, `command`, with the user's words: the prompt is the command.
COMMAND = "echo claude-ran > proof.txt"
# No traffic but the API calls: no telemetry, update checks, error reports or other background requests.
QUIET = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}


@pytest.fixture(scope="session")
def claude(node: str) -> Path:
    """The Claude Code binary installed by `npm ci` (node itself is not needed to run it)."""
    if not os.access(CLAUDE, os.X_OK):
        missing_component(f"{CLAUDE} is missing (npm ci --prefix tests/clients/node)")
    found = subprocess.run(
        [str(CLAUDE), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    if found.returncode != 0 or not found.stdout.startswith(VERSION):
        missing_component(
            f"{CLAUDE} --version did not say {VERSION} (exit {found.returncode}: "
            f"{(found.stdout + found.stderr).strip()[:300]}); its postinstall may not have run"
        )
    return CLAUDE


def claude_print(
    claude: Path, proxy: Proxy, tmp_path: Path, prompt: str, model: str = MODEL
) -> subprocess.CompletedProcess[str]:
    """One headless `claude -p` run in its own HOME and work directory, bounded in time."""
    home, workdir = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    workdir.mkdir()
    # Nothing of the developer's own Claude Code set-up (keys, base URL, model, config dir) leaks in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}
    env |= {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": proxy.url,
        "ANTHROPIC_API_KEY": "sk-test",
        "ANTHROPIC_MODEL": model,
        **QUIET,
    }
    if os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"  # (Claude Code refuses some permission modes as root outside a sandbox)
    argv = [str(claude), "-p", prompt, "--output-format", "json", "--max-turns", "3"]
    # Bash only (the simulated model calls the first tool it is given), allowed without a prompt.
    argv += ["--tools", "Bash", "--allowedTools", "Bash", "--no-session-persistence"]
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


def result_of(stdout: str) -> dict[str, Any]:
    """The `--output-format json` result object (the last JSON line)."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert lines, f"no JSON result on stdout:\n{stdout}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def test_claude_code_runs_a_bash_tool_turn_with_reasoning_replayed_through_the_signature(
    claude: Path, proxy_state_off: Proxy, upstream: Upstream, tmp_path: Path
) -> None:
    done = claude_print(claude, proxy_state_off, tmp_path, COMMAND)

    report = f"exit {done.returncode}\nstdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}\n"
    report += f"proxy:\n{proxy_state_off.output()[-3000:]}\nupstream:\n"
    assert done.returncode == 0, report + upstream.describe()
    result = result_of(done.stdout)
    assert result["subtype"] == "success" and result["is_error"] is False, report
    assert result["num_turns"] == 2 and result["permission_denials"] == [], report
    # The Bash tool really ran, in the work directory.
    assert (tmp_path / "work" / "proof.txt").read_text().strip() == "claude-ran", report

    chats = upstream.chat_requests()
    assert len(chats) == 2, upstream.describe()  # the call, then its result
    first, second = chats
    # Only Bash reached the upstream: the deferred placeholder tool is left out until loaded.
    assert [t["function"]["name"] for t in first["tools"]] == ["Bash"], first["tools"]
    # The environment section, a mid-conversation system message, kept its place after the prompt.
    roles = [m["role"] for m in first["messages"]]
    assert roles == ["system", "user", "system"], roles
    assert "Primary working directory" in first["messages"][2]["content"]

    assert_reasoning_replayed(chats, upstream.describe)
    call_turn, tool_message = second["messages"][-2:]
    # The reasoning the simulated model gave on the first request, restored from the signature
    # (Claude Code itself never saw its text: display omitted).
    assert "I have a tool for this: Bash." in call_turn["reasoning_content"], call_turn
    (call,) = call_turn["tool_calls"]
    assert call["function"]["name"] == "Bash"
    assert json.loads(call["function"]["arguments"]) == {"command": COMMAND}
    # Its result went back upstream as the tool message answering the call.
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == call["id"], tool_message
    assert isinstance(tool_message["content"], str) and tool_message["content"], tool_message
    # The final answer (the simulated model quotes the tool's result) reached Claude Code.
    assert result["result"].startswith("The Bash tool returned:"), report


def test_claude_code_with_a_suffixed_model_gets_its_level(
    claude: Path, proxy_state_off: Proxy, upstream: Upstream, tmp_path: Path
) -> None:
    """`ANTHROPIC_MODEL="deepseek-v4-pro(standard)"`: Claude Code sends its own `thinking`
    (adaptive) and `output_config.effort: high`, deep on DeepSeek; the suffix goes before them, so
    both requests of the tool loop reach DeepSeek at standard, under the model's own name."""
    done = claude_print(claude, proxy_state_off, tmp_path, COMMAND, model=f"{MODEL}(standard)")

    report = f"exit {done.returncode}\nstdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}\n"
    assert done.returncode == 0, report + upstream.describe()
    assert result_of(done.stdout)["is_error"] is False, report
    assert (tmp_path / "work" / "proof.txt").read_text().strip() == "claude-ran", report
    chats = upstream.chat_requests()
    assert len(chats) == 2, upstream.describe()
    for chat in chats:
        assert chat["model"] == MODEL, chat["model"]
        assert chat["thinking"] == {"type": "enabled"} and "reasoning_effort" not in chat, chat
    assert_reasoning_replayed(chats, upstream.describe)
