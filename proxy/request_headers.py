"""Request headers on their way up: the client's exact bytes, and no look-alike control headers.

Pure. ASGI hands header values over as bytes and Starlette decodes them as latin-1, one character
per byte; a value the client sent in UTF-8 (`café`) is then the str `cafÃ©`. Encoding that str
again as UTF-8 (what aiohttp does with every header) doubles the encoding; httpx refuses
non-ASCII str outright. The helpers here give each HTTP client the client's own bytes back.
"""

from __future__ import annotations

from collections.abc import Iterable

from proxy.errors import BadRequest
from proxy.levels import CONTROL_HEADERS

# Spelled with underscores (`X_Thinking_Level`), a control header would be neither read nor
# stripped, and an upstream that folds `_` into `-` (CGI, WSGI, several gateways) would read it as
# the real one. The proxy refuses such a request instead of guessing what was meant.
_LOOK_ALIKES = {name.replace("-", "_"): name for name in CONTROL_HEADERS}


def refuse_control_header_look_alikes(names: Iterable[str]) -> None:
    """400 for a header that is a control header spelled with underscores (names lower-case)."""
    for name in names:
        if "_" in name:
            meant = _LOOK_ALIKES.get(name.replace("-", "_"))
            if meant is not None:
                shown = "-".join(p.capitalize() for p in meant.split("-"))
                raise BadRequest(
                    f"Header {name!r} looks like the proxy's {shown} header spelled with underscores; "
                    f"spell it {shown} (with hyphens), or leave it out.",
                    code="invalid_header",
                    param=name,
                )


def exact_bytes(headers: Iterable[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """Headers as the bytes the client sent (for clients that send bytes as they are: httpx)."""
    return [(_raw(name), _raw(value)) for name, value in headers]


def as_utf8_text(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Values as text that encodes in UTF-8 to the bytes the client sent (for aiohttp, which
    encodes every value as UTF-8). A value whose bytes are not UTF-8 cannot be sent unchanged
    that way: 400 naming the header."""
    out = []
    for name, value in headers:
        if not value.isascii():
            raw = _raw(value)
            try:
                value = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise BadRequest(
                    f"Header {name!r} carries bytes that are not UTF-8; the proxy forwards non-ASCII "
                    "header values only as UTF-8.",
                    code="invalid_header",
                    param=name,
                ) from None
        out.append((name, value))
    return out


def _raw(value: str) -> bytes:
    # A value the proxy made itself may hold characters beyond latin-1: those are sent as UTF-8.
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8")
