"""Upstream URLs from the client's raw request path: the base path is a boundary, never left.

The client talks to the proxy's `/v1`; the upstream base URL ends in its own version prefix
(`/v1`, `/compatible-mode/v1`, `/api/paas/v4`, …), so the part after `/v1` is appended to it.
That part is taken from the path *as sent* (ASGI `raw_path`), not the percent-decoded one: decoding
first turns `..%2F..%2Fsecret` into `../../secret`, which the HTTP client then resolves out of the
base path. What the client sent is forwarded byte for byte (`%ff%c3` stays `%ff%c3`, a
double-encoded `%252F` stays literal); a segment that could mean "this directory" or "up one" to
any server on the way is refused instead of being guessed at.

Pure: strings and bytes in, a string out, `BadRequest` for a path the proxy will not forward.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from proxy.core.errors import BadRequest

# Bytes kept as they are in a forwarded path or query; everything else (spaces, controls, raw
# non-ASCII) is percent-encoded, byte by byte, so the upstream receives exactly the same bytes.
_SAFE_CHARS = "!$&'()*+,-./0123456789:;=@ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~%?"
_SAFE = frozenset(_SAFE_CHARS.encode("ascii"))
_UNSAFE = re.compile(b"[^" + re.escape(_SAFE_CHARS.encode("ascii")) + b"]")
# A "." or ".." segment once percent-escapes are decoded, where a decoded '/' or '\' (many servers
# treat '\' as '/') also separates segments, and ';' starts path parameters that some servers
# drop before resolving dot-segments ("..;/").
_DOT_SEGMENT = re.compile(r"(?:^|[/\\])\.\.?(?:[;/\\]|$)")


def _escape(raw: bytes) -> str:
    if _UNSAFE.search(raw) is None:  # the usual case: nothing to escape
        return raw.decode("ascii")
    return "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in raw)


def escape(text: str) -> str:
    """`text` with every byte that cannot travel in a URL percent-encoded (UTF-8); escapes kept."""
    return _escape(text.encode("utf-8", "surrogateescape"))


def has_dot_segment(raw_path: str) -> bool:
    """Whether a raw path has a segment that a server decoding percent-escapes once, splitting on
    encoded slashes or backslashes, or dropping `;parameters`, could read as `.` or `..`."""
    if "." not in raw_path and "%" not in raw_path:  # the usual case, decided without decoding
        return False
    return _DOT_SEGMENT.search(unquote(raw_path, errors="surrogateescape")) is not None


def client_path(raw_path: bytes) -> str:
    """The client's path after its leading `/v1`, as sent (escaped only where a byte could not
    travel in a URL); `BadRequest` when a segment is a dot-segment in any spelling."""
    # (Some ASGI servers and test transports leave the query string in raw_path.)
    path = _escape(raw_path.split(b"?", 1)[0])
    if has_dot_segment(path):
        raise BadRequest(
            "The request path contains a dot-segment ('.' or '..', possibly percent-encoded or "
            "behind an encoded '/' or '\\'); the proxy does not forward paths that could leave the "
            "upstream base path. Send the path without them.",
            code="invalid_path",
        )
    # segments[0] is the empty string before the leading '/'; segments[1] is 'v1' (the route
    # matched the decoded path), possibly percent-encoded.
    if path.startswith("/v1/"):
        return path[3:]
    segments = path.split("/")
    if len(segments) > 1 and unquote(segments[1]) == "v1":
        rest = segments[2:]
        return "/" + "/".join(rest) if rest else ""
    return path


def upstream_url(base_url: str, raw_path: bytes, query_string: bytes) -> str:
    """`base_url` (no trailing slash, no query) + the client's path after `/v1` + its query."""
    url = base_url + client_path(raw_path)
    if query_string:
        url += "?" + _escape(query_string)
    return url
