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
