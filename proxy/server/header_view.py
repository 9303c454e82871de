"""One request's headers, decoded once (`headers_of`).

Starlette's `Headers` decodes every pair again on each `items()` and looks a name up by scanning
the raw list, raising and catching a KeyError for every header that was not sent (most of the
proxy's own control headers, on most requests). A chat request reads its headers about fifteen
times on the way (its request id, the observers, the control headers, the gateway, the level
sources, the replay store, the upstream's headers): measured, ~2% of a non-stream request's
instructions (bench/README.md, "Issue 42: the JSON figure back"). `RequestHeaders` decodes the
pairs once and keeps the first value of each name in a dict, which is what `Headers.get` returns;
it is kept in the request's scope, so every reader of one request shares it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

_SCOPE_KEY = "thinkproxy.request_headers"


class RequestHeaders(Mapping[str, str]):
    """A request's headers as received (ASGI servers send names lower-case): every pair in order
    (`items`, `keys`: repeated names kept, as Starlette's), and a case-insensitive lookup of each
    name's first value."""

    __slots__ = ("_first", "_pairs")

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        pairs = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw]
        first: dict[str, str] = {}
        for name, value in pairs:  # (names as sent: a server sends them lower-case, as Starlette assumes)
            first.setdefault(name, value)
        self._pairs = pairs
        self._first = first

    def __getitem__(self, name: str) -> str:
        return self._first[name.lower()]

    def get(self, name: str, default: Any = None) -> Any:
        found = self._first.get(name.lower())
        return default if found is None else found

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._first

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._pairs)

    def items(self) -> list[tuple[str, str]]:  # type: ignore[override]
        """Every pair as received, a new list each call (a caller may change its copy)."""
        return list(self._pairs)

    def keys(self) -> list[str]:  # type: ignore[override]
        return [name for name, _ in self._pairs]


def headers_of(scope: MutableMapping[str, Any]) -> RequestHeaders:
    """The request's headers, decoded at the first call and kept in its scope."""
    found = scope.get(_SCOPE_KEY)
    if found is None:
        found = scope[_SCOPE_KEY] = RequestHeaders(scope.get("headers", []))
    return found
