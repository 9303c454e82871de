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
