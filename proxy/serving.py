"""Running ASGI apps under uvicorn: in the foreground (`serve`) or on a background thread
(the demo, and tests that need a real socket on 127.0.0.1)."""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

import uvicorn
from starlette.types import ASGIApp


def bind_loopback(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


class BackgroundServer:
    """A uvicorn server on its own thread and event loop, on a free loopback port.

    Use as a context manager: the port is bound before `__enter__` returns, the server is
    stopped (in-flight requests get `graceful_s` to finish) on exit.
    """

    def __init__(
        self, app: ASGIApp, *, host: str = "127.0.0.1", port: int = 0, graceful_s: float = 1.0
    ) -> None:
        self.sock = bind_loopback(host, port)
        self.host, self.port = self.sock.getsockname()[:2]
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            loop="uvloop",
            http="httptools",
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
