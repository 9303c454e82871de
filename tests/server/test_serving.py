"""proxy.server.serving: what `serve` sets up around uvicorn."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx
import pytest
from starlette.types import Message, Receive, Scope, Send
from websockets.sync.client import connect

from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.limits import MIN_DRAIN_BYTES, WS_MESSAGE_MARGIN, EdgeLimits
from proxy.server.serving import BackgroundServer, _PromptServer, limits_of, raise_fd_limit
from tests.helpers import make_settings, start_serve, worker_pids


@pytest.fixture
def low_soft_limit() -> Iterator[int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"the hard RLIMIT_NOFILE here is {hard}, too low to test raising the soft one")
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
    yield hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_fd_limit_is_raised_to_what_the_settings_need(low_soft_limit: int) -> None:
    assert raise_fd_limit(2048) is None
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 2048


def test_a_hard_limit_too_low_is_a_warning(low_soft_limit: int) -> None:
    if low_soft_limit == resource.RLIM_INFINITY:
        pytest.skip("no hard RLIMIT_NOFILE here")
    warning = raise_fd_limit(low_soft_limit + 1)
    assert warning is not None and "THINKPROXY_MAX_CLIENT_CONNECTIONS" in warning
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == low_soft_limit


def test_background_servers_take_the_edge_limits_from_the_apps_settings() -> None:
    app = create_app(make_settings(header_timeout=1.5, max_header_count=20, max_body_bytes=1000))
    assert limits_of(app) == EdgeLimits(
        max_header_bytes=64 * 1024,
        max_header_count=20,
        header_timeout=1.5,
        body_timeout=60.0,
        max_connections=4096,
        drain_bytes=MIN_DRAIN_BYTES,  # (at least: a body 3 MB over a small limit gets its 413)
        ws_message_bytes=1000 + WS_MESSAGE_MARGIN,
    )


def test_a_websocket_message_the_body_limit_allows_reaches_the_door() -> None:
    """uvicorn reads WebSocket messages up to 16 MiB unless told otherwise: a 17 MiB message under
    the default 32 MiB body limit was closed with 1009 before the door saw it."""
    app = create_app(make_settings())
    headers = {"Authorization": "Bearer sk-test"}
    with (
        BackgroundServer(app) as server,
        connect(
            f"ws://127.0.0.1:{server.port}/v1/responses", additional_headers=headers, max_size=None
        ) as ws,
    ):
        ws.send(json.dumps({"type": "response.cancel", "pad": "x" * (17 * 1024 * 1024)}))
        reply = json.loads(ws.recv(timeout=60))
    assert reply["type"] == "error" and reply["error"]["code"] == "unknown_event_type"
    assert limits_of(create_app(make_settings(max_body_bytes=40 << 20))).drain_bytes == 80 << 20
    assert limits_of(object()) == EdgeLimits()  # type: ignore[arg-type]


# --- one Server header ---------------------------------------------------------------------------

ASK = {"model": "deepseek-v4-pro", "messages": [{"role": "user", "content": "hi"}]}


def upstream_with_a_server_header() -> BackgroundServer:
    """The simulated upstream, answering with a Server header of its own (as real providers do)."""
    mock = create_mock_app(MockOptions())

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"server", b"upstream/1.0")]
            await send(message)

        await mock(scope, receive, sending)

    return BackgroundServer(app)


def server_headers(base: str) -> dict[str, list[str]]:
    """The `server` header lines of a relayed answer (the simulated upstream sends its own), of the
    proxy's own answer and of an answer the edge writes itself (431)."""
    relayed = httpx.post(f"{base}/v1/chat/completions", json=ASK, timeout=20)
    own = httpx.get(f"{base}/healthz", timeout=20)
    edge = httpx.get(f"{base}/healthz", headers={"x-pad": "a" * 70_000}, timeout=20)
    assert (relayed.status_code, own.status_code, edge.status_code) == (200, 200, 431), relayed.text
    return {
        "relayed": relayed.headers.get_list("server"),
        "own": own.headers.get_list("server"),
        "edge": edge.headers.get_list("server"),
    }


def test_a_background_server_stops_when_told_not_at_its_next_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    """stop() wakes the server's main loop: with a tick of an hour, a server that only looked at
    its exit flag on the tick would still be running when stop() gives up waiting for it (15 s)."""
    monkeypatch.setattr(_PromptServer, "TICK_S", 3600.0)
    server = BackgroundServer(create_mock_app(MockOptions())).start()
    assert httpx.get(f"{server.url}/").status_code == 200
    server.stop()
    assert not server.thread.is_alive()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/")


def test_a_background_server_sends_one_server_header() -> None:
    """uvicorn adds its own `server` unless told not to, and a relayed answer already has the
    upstream's: two. (BackgroundServer is what `thinkproxy demo` serves with.) The upstream's is
    passed on as it came; the proxy's own answers name no server."""
    from proxy.demo import simulated_table

    with upstream_with_a_server_header() as mock:
        app = create_app(
            make_settings(upstream_base_url=f"{mock.url}/deepseek/v1"), table=simulated_table(mock.port)
        )
        with BackgroundServer(app) as proxy:
            assert server_headers(proxy.url) == {"relayed": ["upstream/1.0"], "own": [], "edge": []}


def test_serve_sends_one_server_header(tmp_path: Path) -> None:
    from tests.helpers import simulated_providers_file

    with upstream_with_a_server_header() as mock:
        providers = simulated_providers_file(tmp_path, mock.port)
        server, base = start_serve(mock, "--providers", str(providers), THINKPROXY_STATE="off")
        try:
            assert server_headers(base) == {"relayed": ["upstream/1.0"], "own": [], "edge": []}
        finally:
            server.terminate()
            server.communicate(timeout=20)  # (reads its output to the end and closes the pipe)


# --- a worker outlives no parent ----------------------------------------------------------------

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads processes from /proc")


def running(pid: int) -> bool:
    """Whether `pid` still runs (a zombie has exited: it only waits for whoever adopted it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_until_gone(pids: Iterable[int], within_s: float = 30.0) -> list[int]:
    """Polls (bounded) until none of `pids` runs; returns those still running at the deadline."""
    deadline = time.monotonic() + within_s
    while (alive := [pid for pid in pids if running(pid)]) and time.monotonic() < deadline:
        threading.Event().wait(0.05)
    return alive


def kill_all(pids: Iterable[int]) -> None:
    """This test's own processes, should a failed assertion leave them behind."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@linux_only
def test_workers_exit_when_serve_is_killed_and_the_next_start_removes_its_metrics_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    env = {"TMPDIR": str(tmp_path), "THINKPROXY_LOG_LEVEL": "warning"}  # its metrics directory: here
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="deepseek"))) as mock:
        serve, _ = start_serve(mock, "--workers", "2", **env)
        workers = worker_pids(serve.pid, 2)
        try:
            assert len(workers) == 2
            (left,) = tmp_path.glob("thinkproxy-metrics-*")
            serve.kill()  # SIGKILL: the parent gets no chance to stop its workers
            serve.wait(timeout=30)
            assert wait_until_gone(workers) == []
            assert left.is_dir()  # nobody could remove it
            again, _ = start_serve(mock, "--workers", "2", **env)
            try:
                assert not left.exists()
                assert len(list(tmp_path.glob("thinkproxy-metrics-*"))) == 1  # the new run's own
            finally:
                again.terminate()
                again.communicate(timeout=30)
        finally:
            kill_all(workers)
            if serve.stdout is not None:
                serve.stdout.close()


_ORPHANED = textwrap.dedent(
    """
    import os, subprocess, sys
    watch = (
        "import sys; from proxy.server.serving import watch_parent; print('watching', flush=True); "
        "watch_parent(int(sys.argv[1]), 0.05)"
    )
    child = subprocess.Popen([sys.executable, "-c", watch, str(os.getpid())])
    print(child.pid, flush=True)
    child.wait()
    """
)


@linux_only
def test_where_the_kernel_cannot_tell_a_watchdog_notices_the_parent_died() -> None:
    parent = subprocess.Popen([sys.executable, "-c", _ORPHANED], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    # Two lines in either order: the parent's (the child's pid) and the child's, on the pipe it
    # inherited, once it watches.
    lines = {parent.stdout.readline().strip(), parent.stdout.readline().strip()}
    parent.stdout.close()
    assert "watching" in lines, lines
    (child,) = (int(line) for line in lines if line.isdigit())
    try:
        assert running(child)
        parent.kill()
        parent.wait(timeout=30)
        assert wait_until_gone([child]) == []
    finally:
        kill_all([child])
