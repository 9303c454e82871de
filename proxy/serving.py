"""Running ASGI apps under uvicorn: in the foreground (`serve`) or on a background thread
(the demo, and tests that need a real socket on 127.0.0.1). Both serve HTTP/1.1 through
proxy.edge, which bounds what one client connection may cost (proxy.limits)."""

from __future__ import annotations

import resource
import socket
import threading
import time
from types import TracebackType

import uvicorn
from starlette.types import ASGIApp

from proxy.edge import EdgeProtocol
from proxy.limits import EdgeLimits


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


def limits_of(app: ASGIApp) -> EdgeLimits:
    """The edge limits a proxy app's settings ask for (defaults for any other app)."""
    services = getattr(getattr(app, "state", None), "services", None)
    settings = getattr(services, "settings", None)
    return EdgeLimits.from_settings(settings) if settings is not None else EdgeLimits()


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
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            loop="uvloop",
            http=EdgeProtocol.factory(limits or limits_of(app)),
            lifespan="on",
            timeout_graceful_shutdown=max(1, round(graceful_s)),
        )
        self.server = uvicorn.Server(config)
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
        self.server.should_exit = True
        self.thread.join(timeout=15.0)
        self.sock.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
