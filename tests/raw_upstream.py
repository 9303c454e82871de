"""A misbehaving upstream on 127.0.0.1: answers each request with scripted raw bytes.

For what a well-behaved server framework cannot send: bodies short of their content-length,
broken chunked framing, resets, 101 and out-of-range statuses, control bytes in header values.
Each connection reads one request (head and content-length body), records it, then plays the
script: bytes to send, pauses, and how to end (close, reset, or keep the socket open).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType

RESET = "reset"  # end with a TCP RST instead of a FIN
HOLD = "hold"  # keep the connection open (until the server stops)

Step = bytes | float | str  # bytes to send, seconds to pause, or RESET / HOLD


@dataclass
class Received:
    head: bytes
    body: bytes


class RawUpstream:
    """`script(request) -> steps` answers every request; the requests seen are in `received`."""

    def __init__(self, script: Sequence[Step] | Callable[[Received], Sequence[Step]]) -> None:
        self.script = script
        self.received: list[Received] = []
        self.closed = threading.Event()  # set when a connection ended because its peer left
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.1)
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accepter = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> RawUpstream:
        self._accepter.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._accepter.join(5)
        for thread in self._threads:
            thread.join(5)
        self._sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        try:
            request = _read_request(conn)
            if request is None:
                return
            self.received.append(request)
            steps = self.script(request) if callable(self.script) else self.script
            for step in steps:
                if isinstance(step, bytes):
                    conn.sendall(step)
                elif isinstance(step, float | int):
                    time.sleep(step)
                elif step == RESET:
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                elif step == HOLD:
                    conn.settimeout(0.1)
                    while not self._stop.is_set():
                        try:
                            if conn.recv(65536) == b"":
                                self.closed.set()
                                return
                        except TimeoutError:
                            continue
        except OSError:
            self.closed.set()  # the peer went away while we were sending
        finally:
            conn.close()


def _read_request(conn: socket.socket) -> Received | None:
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return None
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        piece = conn.recv(65536)
        if not piece:
            break
        body += piece
    return Received(head, body)


def response(status: str, headers: Sequence[tuple[str, str]] = (), body: bytes = b"") -> bytes:
    """A complete response head (and body), exactly as given: no header is added."""
    lines = [f"HTTP/1.1 {status}".encode()]
    lines += [f"{k}: {v}".encode("latin-1") for k, v in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def chunked(*pieces: bytes, end: bool = True) -> bytes:
    out = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
    return out + (b"0\r\n\r\n" if end else b"")
