"""Real Responses-API clients against a real `thinkproxy serve` in front of the simulated DeepSeek.

The upstream is the simulated DeepSeek (`{mock.url}/deepseek/v1`, model `deepseek-v4-pro`), whose
mock enforces DeepSeek's rule that `reasoning_content` must be passed back on tool-call turns. Two
proxies serve the tests, each started once per session on 127.0.0.1: one with the state store on
(what `previous_response_id` and the AI SDK's `item_reference` need) and one with
`THINKPROXY_STATE=off`, where reasoning can only survive a tool loop through the proxy's sealed
`encrypted_content` that the client echoes back.

The Node clients (Codex CLI, Claude Code, the AI SDK) live in tests/clients/node. The test session
installs them itself when node and npm are on PATH: `npm ci` from the committed lockfile, once, and
again only when the lockfile is newer than the install (so the README's one test command runs
them). On a developer machine without node or npm the Node tests are skipped and the reason is
printed at the end of the run; in CI (`CI=true`) a missing client fails instead: a test that needs
a real component must run there.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.mock import MockOptions, create_mock_app
from proxy.server.serving import BackgroundServer
from tests.helpers import free_port, simulated_providers_file

NODE_DIR = Path(__file__).resolve().parent / "node"
MODEL = "deepseek-v4-pro"
API_KEY = "sk-clients-test"
START_S = 30.0  # a proxy must answer /healthz within this
_SKIPPED: list[str] = []


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing_component(reason: str) -> None:
    """Fail in CI, skip (and say why at the end of the run) on a developer machine."""
    if in_ci():
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    _SKIPPED.append(reason)
    pytest.skip(reason)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for reason in dict.fromkeys(_SKIPPED):
        terminalreporter.write_line(f"tests/clients skipped: {reason}", yellow=True)


def require_module(name: str) -> None:
    if importlib.util.find_spec(name) is None:
        missing_component(f"the Python package {name!r} is not installed (pip install -e '.[test]')")


NPM_CI_TIMEOUT_S = 900.0  # the clients ship native binaries: a cold install downloads ~300 MB


def needs_install(folder: Path) -> bool:
    """Whether `folder`'s packages must be (re)installed: never installed, or its lockfile changed
    since (npm writes node_modules/.package-lock.json at every install)."""
    installed = folder / "node_modules" / ".package-lock.json"
    if not installed.is_file():
        return True
    return (folder / "package-lock.json").stat().st_mtime > installed.stat().st_mtime


def install_clients(folder: Path, npm: str, say: Callable[[str], None]) -> str | None:
    """`npm ci` in `folder` from its committed lockfile; None, or why it failed."""
    say(f"tests/clients: installing the Node clients from {folder.name}/package-lock.json (npm ci, once)")
    try:
        done = subprocess.run(
            [npm, "ci", "--prefix", str(folder), "--no-audit", "--no-fund", "--loglevel=error"],
            capture_output=True,
            text=True,
            timeout=NPM_CI_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"npm ci --prefix {folder} did not finish within {NPM_CI_TIMEOUT_S:.0f} s"
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return f"npm ci --prefix {folder} failed ({done.returncode}): {' / '.join(tail)}"
    return None


@pytest.fixture(scope="session")
def node(pytestconfig: pytest.Config) -> str:
    """The node binary, with tests/clients/node's packages installed (by this session if needed)."""
    found = shutil.which("node")
    if found is None:
        missing_component("node is not on PATH (Debian: apt-get install nodejs npm)")
    assert found is not None
    if needs_install(NODE_DIR):
        npm = shutil.which("npm")
        if npm is None:
            missing_component(
                "npm is not on PATH, so tests/clients/node cannot be installed (apt-get install npm)"
            )
        assert npm is not None
        reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
        say = (lambda line: reporter.write_line(line)) if reporter is not None else print
        failure = install_clients(NODE_DIR, npm, say)
        if failure is not None:
            missing_component(failure)
    return found


@pytest.fixture(scope="session")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions())) as server:
        yield server


@dataclass
class Proxy:
    """A `thinkproxy serve` process; `url` is its origin, `base` its /v1 URL."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def base(self) -> str:
        return f"{self.url}/v1"

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


# The admin key of the `proxy_state_off` fixture's serve, for its /thinkproxy/* reads.
ADMIN_KEY = "ak-clients"


def start_proxy(mock: BackgroundServer, directory: Path, **env: str) -> Proxy:
    """`thinkproxy serve` in front of the simulated DeepSeek, its output to a file (a pipe nobody
    reads could fill and stall it); returns once /healthz answers 200."""
    providers = simulated_providers_file(directory, mock.port)
    port = free_port()
    log = directory / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "proxy.cli", "serve", "--providers", str(providers)],
            env={
                **os.environ,
                "THINKPROXY_UPSTREAM_BASE_URL": f"{mock.url}/deepseek/v1",
                "THINKPROXY_HOST": "127.0.0.1",
                "THINKPROXY_PORT": str(port),
                "THINKPROXY_LOG_LEVEL": "warning",
                **env,
            },
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    proxy = Proxy(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + START_S
    while process.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{proxy.url}/healthz", timeout=2).status_code == 200:
                return proxy
        threading.Event().wait(0.05)
    stop_proxy(proxy)
    pytest.fail(f"thinkproxy serve never answered /healthz with 200:\n{proxy.output()}")


def stop_proxy(proxy: Proxy) -> None:
    if proxy.process.poll() is None:
        proxy.process.terminate()
        try:
            proxy.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proxy.process.kill()
            proxy.process.wait(timeout=20)


@pytest.fixture(scope="session")
def proxy(mock: BackgroundServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    """The proxy with its state store on (in memory): `store`, `previous_response_id`, item references."""
    started = start_proxy(mock, tmp_path_factory.mktemp("proxy-state-on"), THINKPROXY_STATE="on")
    yield started
    stop_proxy(started)


@pytest.fixture(scope="session")
def proxy_state_off(mock: BackgroundServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    """The proxy with `THINKPROXY_STATE=off`: reasoning survives a tool loop only through the sealed
    `encrypted_content` the client echoes back."""
    started = start_proxy(
        mock,
        tmp_path_factory.mktemp("proxy-state-off"),
        THINKPROXY_STATE="off",
        THINKPROXY_ADMIN_KEYS=f"ops:{ADMIN_KEY}",  # (the sessions API reads with it)
    )
    yield started
    stop_proxy(started)


class Upstream:
    """The simulated upstream's request log (`/_mock/requests`), emptied before each test."""

    def __init__(self, mock: BackgroundServer) -> None:
        self.url = mock.url

    def clear(self) -> None:
        httpx.delete(f"{self.url}/_mock/requests", timeout=10).raise_for_status()

    def requests(self) -> list[dict[str, Any]]:
        answer = httpx.get(f"{self.url}/_mock/requests", timeout=10)
        answer.raise_for_status()
        log: list[dict[str, Any]] = answer.json()
        return log

    def chat_requests(self) -> list[dict[str, Any]]:
        """The bodies of the chat-completions requests that reached the simulated DeepSeek."""
        return [
            entry["body"]
            for entry in self.requests()
            if entry["method"] == "POST" and entry["path"] == "/deepseek/v1/chat/completions"
        ]

    def describe(self) -> str:
        """The log in short, for assertion messages."""
        return "\n".join(f"{e['method']} {e['path']} -> {str(e['body'])[:300]}" for e in self.requests())


@pytest.fixture
def upstream(mock: BackgroundServer) -> Upstream:
    log = Upstream(mock)
    log.clear()
    return log


def replayed_tool_turns(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The assistant messages with tool calls in a chat request body."""
    return [m for m in body.get("messages", []) if m.get("role") == "assistant" and m.get("tool_calls")]


def assert_reasoning_replayed(chats: list[dict[str, Any]], describe: Callable[[], str]) -> None:
    """The tool loop's second upstream request carried DeepSeek's `reasoning_content` on the
    assistant tool-call message (the simulated DeepSeek answers 400 without it)."""
    assert len(chats) >= 2, f"expected two upstream chat requests (call, then result):\n{describe()}"
    turns = replayed_tool_turns(chats[1])
    assert turns, f"the second upstream request has no assistant tool-call message:\n{chats[1]}"
    reasoning = turns[-1].get("reasoning_content")
    assert isinstance(reasoning, str) and reasoning.strip(), (
        f"the assistant tool-call message went upstream without its reasoning_content:\n{turns[-1]}"
    )


def run_node(
    node: str, script: str, env: dict[str, str], timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """A script in tests/clients/node, bounded in time."""
    return subprocess.run(
        [node, str(NODE_DIR / script)],
        cwd=NODE_DIR,
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
