"""The simulated upstream as the proxy sees it (proxy.simulated), and `thinkproxy serve --mock`,
which puts the proxy in front of it as `thinkproxy demo` does: each path prefix is the providers.yaml
entry it imitates, not the `self-hosted` entry a bare loopback upstream matches."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proxy.cli import main
from proxy.core.config.providers import ProvidersTable, default_providers_path
from proxy.core.errors import ConfigError
from proxy.server.serving import bind_loopback
from proxy.simulated import SIMULATED_ROUTES, simulated_providers_text, simulated_serve, simulated_table
from tests.helpers import free_port

QUESTION = "Is 1,000,003 prime?"


def test_the_providers_file_maps_each_prefix_as_the_in_process_table_does(tmp_path: Path) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text(simulated_providers_text(18090), encoding="utf-8")
    from_file, in_process = ProvidersTable.load(path), simulated_table(18090)
    for prefix, entry in SIMULATED_ROUTES.items():
        url = f"http://127.0.0.1:18090/{prefix}/v1"
        assert from_file.match(url).name == in_process.match(url).name == entry
        assert from_file.match(url).messages == in_process.match(url).messages
    # Without a prefix the simulated upstream is just a loopback server: the self-hosted entry.
    assert from_file.match("http://127.0.0.1:18090/v1").name == "self-hosted"


def test_the_providers_file_maps_onto_the_operator_s_own_table(tmp_path: Path) -> None:
    mine = tmp_path / "mine.yaml"
    shipped = default_providers_path().read_text(encoding="utf-8")
    mine.write_text(shipped.replace("api.deepseek.com", "deepseek.example.com"), encoding="utf-8")
    mapped = tmp_path / "mapped.yaml"
    mapped.write_text(simulated_providers_text(18090, mine), encoding="utf-8")
    table = ProvidersTable.load(mapped)
    assert table.match("https://deepseek.example.com/v1").name == "deepseek"
    assert table.match("http://127.0.0.1:18090/deepseek/v1").name == "deepseek"


def test_a_table_without_an_imitated_entry_is_said_in_one_line(tmp_path: Path) -> None:
    bare = tmp_path / "bare.yaml"
    bare.write_text("providers: {}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"no entry 'deepseek'"):
        simulated_providers_text(18090, bare)


def test_an_unknown_provider_or_a_busy_port_is_a_config_error() -> None:
    with (
        pytest.raises(ConfigError, match=r"unknown simulated provider 'nope'.*deepseek"),
        simulated_serve("nope"),
    ):
        pass
    taken = bind_loopback("127.0.0.1", 0)
    try:
        port = taken.getsockname()[1]
        with (
            pytest.raises(ConfigError, match=rf"--mock-port {port}: cannot listen"),
            simulated_serve("deepseek", port),
        ):
            pass
    finally:
        taken.close()


def test_serve_refuses_mock_flags_that_contradict(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--mock", "--upstream", "https://api.deepseek.com/v1"]) == 2
    assert "give --mock or --upstream, not both" in capsys.readouterr().err
    assert main(["serve", "--mock-port", "8090"]) == 2
    assert "--mock-port needs --mock" in capsys.readouterr().err
    assert main(["serve", "--mock", "nope"]) == 2
    assert "unknown simulated provider 'nope'" in capsys.readouterr().err


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`thinkproxy serve --mock` as a user runs it: (the proxy's origin, the simulated upstream's)."""
    port, mock_port = free_port(), free_port()
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("THINKPROXY_")} | {
        "TMPDIR": str(temporary)
    }
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "proxy.cli",
                "serve",
                "--mock",
                "--port",
                str(port),
                "--mock-port",
                str(mock_port),
            ],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    origin = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30.0
        while True:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            try:
                if httpx.get(f"{origin}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        yield origin, f"http://127.0.0.1:{mock_port}"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, log.read_text()
        assert "entry 'deepseek'" in log.read_text()
        assert list(temporary.iterdir()) == []  # the mapped providers file went with it
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_serve_mock_answers_each_door_as_the_deepseek_entry(served: tuple[str, str]) -> None:
    origin, mock = served
    chat = httpx.post(
        f"{origin}/v1/chat/completions",
        headers={"X-Thinking-Level": "deep"},
        json={"model": "deepseek-v4-pro", "messages": [{"role": "user", "content": QUESTION}]},
        timeout=30,
    )
    responses = httpx.post(
        f"{origin}/v1/responses",
        json={"model": "deepseek-v4-pro", "input": QUESTION, "reasoning": {"effort": "high"}},
        timeout=30,
    )
    messages = httpx.post(
        f"{origin}/v1/messages",
        headers={"anthropic-version": "2023-06-01"},
        json={
            "model": "deepseek-v4-pro",
            "max_tokens": 2048,
            "thinking": {"type": "adaptive"},
            "output_config": {"effort": "high"},
            "messages": [{"role": "user", "content": QUESTION}],
        },
        timeout=30,
    )
    for answer in (chat, responses, messages):
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-thinking-provider"] == "deepseek"
        assert answer.headers["x-thinking-level-applied"] == "deep"
    received = httpx.get(f"{mock}/_mock/requests", timeout=5).json()
    assert [r["path"] for r in received] == ["/deepseek/v1/chat/completions"] * 3
    # DeepSeek's own deep knobs, not the self-hosted entry's chat_template_kwargs.
    for request in received:
        assert request["body"]["thinking"] == {"type": "enabled"}
        assert request["body"]["reasoning_effort"] == "max"
        assert "chat_template_kwargs" not in request["body"]
    assert responses.json()["output"][0]["type"] == "reasoning"
    assert messages.json()["content"][0]["type"] == "thinking"


def test_serve_mock_lets_clients_pick_another_simulated_provider(served: tuple[str, str]) -> None:
    origin, mock = served
    answer = httpx.post(
        f"{origin}/v1/chat/completions",
        headers={"X-Thinking-Level": "off", "X-Upstream-Base-URL": f"{mock}/kimi/v1"},
        json={"model": "kimi-k2.5", "messages": [{"role": "user", "content": QUESTION}]},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-thinking-provider"] == "kimi"
    assert answer.headers["x-thinking-level-applied"] == "off"
