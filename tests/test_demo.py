"""`thinkproxy demo` is the first thing a new user runs: it must work and show the timeline."""

from __future__ import annotations

import pytest

from proxy.demo import run_demo


def test_demo_runs_and_shows_levels_tools_trace_and_prompted_thinking(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_demo(color=False) == 0
    out = capsys.readouterr().out
    assert '{"thinking":{"type":"disabled"}}' in out
    assert '{"thinking":{"type":"enabled"},"reasoning_effort":"max"}' in out
    assert "get_weather" in out and "tool_call.end" in out and "tool_result" in out
    assert "replayed as inline <think>" in out
    assert "system instruction injected" in out
    assert "<think>" not in out.split("3. A model with no thinking knob")[1]
    assert "console: http://127.0.0.1:" in out and "/ui#playground" in out and "--keep" in out


def test_demo_shows_the_responses_and_messages_doors(capsys: pytest.CaptureFixture[str]) -> None:
    """One request by each front door: what reached the upstream, the level, the door's events, the trace."""
    assert run_demo(color=False) == 0
    out = capsys.readouterr().out
    responses = out.split("4. The Responses door")[1].split("5. The Messages door")[0]
    messages = out.split("5. The Messages door")[1]
    assert "POST /v1/responses" in responses and "POST /deepseek/v1/chat/completions" in responses
    assert '"thinking":{"type":"enabled"}' in responses and "level applied  deep" in responses
    assert "response.created" in responses and "response.completed" in responses
    assert "tool_call.end" in responses and "get_weather" in responses
    assert "POST /v1/messages" in messages and "POST /deepseek/v1/chat/completions" in messages
    assert "level applied  standard" in messages
    assert "message_start" in messages and "message_stop" in messages and "thinking" in messages
    assert "reasoning.end" in messages and "done" in messages


def test_demo_keep_serves_the_console_until_stopped() -> None:
    import os
    import re
    import signal
    import subprocess
    import sys

    import httpx

    demo = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "demo", "--keep", "--no-color"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert demo.stdout is not None
        url = None
        for raw in demo.stdout:  # bounded: the demo prints a few dozen lines, then this one
            line = raw.decode()
            found = re.search(r"stay up: open (http://127\.0\.0\.1:\d+/ui)", line)
            if found:
                url = found.group(1)
                break
        assert url is not None
        assert httpx.get(url, timeout=5).status_code == 200
        assert len(httpx.get(url.replace("/ui", "/thinkproxy/requests"), timeout=5).json()["data"]) >= 6
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=30) == 0
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()


def test_an_agent_session_against_the_demo_calls_one_harmless_tool_and_ends() -> None:
    """Claude Code by the Messages door, Codex by the Responses door, on the demo's set-up (the
    simulated DeepSeek, bridged): the model calls the shell tool with `echo` — never `Agent` —
    then answers the tool's result, and the turn ends."""
    import httpx

    from proxy.demo import simulated_table
    from proxy.mock import MockOptions, create_mock_app
    from proxy.server.app import create_app
    from proxy.server.serving import BackgroundServer
    from tests.helpers import make_settings

    text = {"type": "string"}
    agent = {
        "name": "Agent",
        "input_schema": {"type": "object", "properties": {"prompt": text}, "required": ["prompt"]},
    }
    bash = {
        "name": "Bash",
        "input_schema": {
            "type": "object",
            "properties": {"command": text, "description": text},
            "required": ["command"],
        },
    }
    with BackgroundServer(create_mock_app(MockOptions())) as mock:
        settings = make_settings(upstream_base_url=f"{mock.url}/deepseek/v1")
        with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as proxy:
            claude = {
                "x-api-key": "sk-demo",
                "anthropic-version": "2023-06-01",
                "x-thinking-level": "standard",
            }
            ask = [{"role": "user", "content": "What is in this project?"}]
            body = {"model": "deepseek-v4-pro", "max_tokens": 1024, "tools": [agent, bash], "messages": ask}
            first = httpx.post(f"{proxy.url}/v1/messages", json=body, headers=claude, timeout=30).json()
            assert first["stop_reason"] == "tool_use", first
            (use,) = [b for b in first["content"] if b["type"] == "tool_use"]
            assert use["name"] == "Bash" and use["input"]["command"] == "echo 'What is in this project'"
            result = {"type": "tool_result", "tool_use_id": use["id"], "content": "What is in this project?"}
            reminder = {"type": "text", "text": "<system-reminder>\nTodo list is empty.\n</system-reminder>"}
            body["messages"] = [
                *ask,
                {"role": "assistant", "content": first["content"]},
                {"role": "user", "content": [result, reminder]},
            ]
            second = httpx.post(f"{proxy.url}/v1/messages", json=body, headers=claude, timeout=30).json()
            assert second["stop_reason"] == "end_turn", second
            assert second["content"][-1]["text"].startswith("The Bash tool returned:")

            codex = {"authorization": "Bearer sk-demo"}
            exec_command = {
                "type": "function",
                "name": "exec_command",
                "parameters": {"type": "object", "properties": {"cmd": text}, "required": ["cmd"]},
            }
            request = {
                "model": "deepseek-v4-pro",
                "input": "Fix the bug.",
                "tools": [exec_command],
                "store": False,
            }
            turn = httpx.post(f"{proxy.url}/v1/responses", json=request, headers=codex, timeout=30).json()
            (call,) = [o for o in turn["output"] if o["type"] == "function_call"]
            assert call["name"] == "exec_command" and call["arguments"] == '{"cmd":"echo \'Fix the bug.\'"}'
            output = {"type": "function_call_output", "call_id": call["call_id"], "output": "Fix the bug."}
            request["input"] = [{"role": "user", "content": "Fix the bug."}, *turn["output"], output]
            done = httpx.post(f"{proxy.url}/v1/responses", json=request, headers=codex, timeout=30).json()
            assert [o["type"] for o in done["output"]][-1] == "message" and done["status"] == "completed"
            assert "function_call" not in [o["type"] for o in done["output"]]
