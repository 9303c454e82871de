"""Which headers travel between the client and the upstream: hop-by-hop ones never do."""

from __future__ import annotations

from collections.abc import Iterable

# RFC 9110 §7.6.1 hop-by-hop headers, plus the ones the proxy recomputes itself.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)


def filter_headers(pairs: Iterable[tuple[str, str]], drop: frozenset[str]) -> list[tuple[str, str]]:
    """Headers minus hop-by-hop ones, any named in `Connection`, and `drop` (lower-case names).

    Every occurrence of a repeated header is kept, in order (two Set-Cookie stay two)."""
    pairs = list(pairs)
    lowered = [name.lower() for name, _ in pairs]  # (each name lowered once, not once per test)
    named: frozenset[str] | set[str] = _NONE
    if "connection" in lowered:
        named = {
            token.strip().lower()
            for low, (_, value) in zip(lowered, pairs, strict=True)
            if low == "connection"
            for token in value.split(",")
        }
    return [
        pair
        for low, pair in zip(lowered, pairs, strict=True)
        if low not in HOP_BY_HOP and low not in drop and low not in named
    ]


_NONE: frozenset[str] = frozenset()
