"""Running ASGI apps under uvicorn: in the foreground (`serve`) or on a background thread
(the demo, and tests that need a real socket on 127.0.0.1). Both serve HTTP/1.1 through
proxy.server.edge, which bounds what one client connection may cost (proxy.server.limits).

`exit_with_parent` makes a `serve --workers N` worker stop when the parent that supervises it
dies, however it died."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import multiprocessing
import os
import resource
import signal
import socket
import sys
import threading
import time
from types import TracebackType

import uvicorn
from starlette.types import ASGIApp

from proxy.server.edge import EdgeProtocol
from proxy.server.limits import EdgeLimits
from proxy.server.websocket_protocol import WS_PROTOCOL


def bind_loopback(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def raise_fd_limit(needed: int) -> str | None:
    """Raise this process's soft RLIMIT_NOFILE to `needed` where the hard limit allows (worker
    processes inherit it); a warning to print when it cannot reach `needed`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        if target < needed:
            return (
                f"the file descriptor limit ({target}) is below the {needed} that "
                "THINKPROXY_MAX_CLIENT_CONNECTIONS + THINKPROXY_MAX_UPSTREAM_CONNECTIONS may need; "
                "raise `ulimit -n` or lower those settings"
            )
    return None


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PARENT_POLL_S = 1.0  # the watchdog's period where the kernel cannot signal a parent's death


def exit_with_parent() -> None:
    """In a worker process of `serve --workers N`: shut down (SIGTERM, uvicorn's graceful shutdown)
    when the parent process dies. The parent stops its workers when it is told to stop; killed
    (SIGKILL, the OOM killer) it cannot, and they went on serving the shared socket with nobody
    to restart or stop them, and its metrics directory stayed behind. A no-op in a process no
    parent supervises (one worker: uvicorn serves in the `serve` process itself)."""
    parent = multiprocessing.parent_process()  # uvicorn starts its workers with multiprocessing
    if parent is None or parent.pid is None:
        return
    if not _signal_on_parent_death(signal.SIGTERM):
        threading.Thread(target=watch_parent, args=(parent.pid,), name="parent-watch", daemon=True).start()
    if os.getppid() != parent.pid:  # it died before the kernel was asked to tell
        os.kill(os.getpid(), signal.SIGTERM)


def _signal_on_parent_death(sig: int) -> bool:
    """Linux: the kernel sends `sig` to this process when its parent dies. (Strictly, when the
    parent's thread that started it ends: uvicorn starts and restarts workers from its main
    thread, whose end is the process's.) False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(sig), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def watch_parent(parent: int, interval: float = PARENT_POLL_S) -> None:
    """Elsewhere: poll. An orphan is adopted by another process, so its parent pid changes."""
    while os.getppid() == parent:
        time.sleep(interval)
    os.kill(os.getpid(), signal.SIGTERM)


def limits_of(app: ASGIApp) -> EdgeLimits:
    """The edge limits a proxy app's settings ask for (defaults for any other app)."""
    services = getattr(getattr(app, "state", None), "services", None)
    settings = getattr(services, "settings", None)
    return EdgeLimits.from_settings(settings) if settings is not None else EdgeLimits()


class _PromptServer(uvicorn.Server):
    """uvicorn's server, whose main loop also wakes when told to exit (`exit_soon`, from any
    thread) instead of only at its next 0.1 s tick: a server on a thread stops ~50 ms sooner on
    average, which the demo's and the tests' hundreds of short-lived servers each paid."""

    TICK_S = 0.1  # uvicorn's own tick (the Date header, the exit check)

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Future[None] | None = None

    async def main_loop(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            wake = self._wake = loop.create_future()
            tick = loop.call_later(self.TICK_S, _settle, wake)
            if self.should_exit:  # (told between the tick and the future: no wait)
                _settle(wake)
            await wake
            tick.cancel()
            should_exit = await self.on_tick(counter)

    def exit_soon(self) -> None:
        """`should_exit`, and the main loop woken to see it (thread-safe)."""
        self.should_exit = True
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            # (RuntimeError: the loop closed in between; the server is stopping anyway)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, wake)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class BackgroundServer:
    """A uvicorn server on its own thread and event loop, on a free loopback port.

    Use as a context manager: the port is bound before `__enter__` returns, the server is
    stopped (in-flight requests get `graceful_s` to finish) on exit.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        graceful_s: float = 1.0,
        limits: EdgeLimits | None = None,
    ) -> None:
        self.sock = bind_loopback(host, port)
        self.host, self.port = self.sock.getsockname()[:2]
        limits = limits or limits_of(app)
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            loop="uvloop",
            http=EdgeProtocol.factory(limits),
            ws_max_size=limits.ws_message_bytes,
            ws=WS_PROTOCOL,
            lifespan="on",
            timeout_graceful_shutdown=max(1, round(graceful_s)),
            # As `serve`: a relayed answer carries the upstream's own Server header, and uvicorn's
            # would be a second one.
            server_header=False,
        )
        self.server = _PromptServer(config)
        self.thread = threading.Thread(target=self._run, name=f"uvicorn-{self.port}", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _run(self) -> None:
        self.server.run(sockets=[self.sock])

    def start(self) -> BackgroundServer:
        self.thread.start()
        deadline = time.monotonic() + 10.0
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server on {self.url} failed to start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        self.server.exit_soon()
        self.thread.join(timeout=15.0)
        self.sock.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
