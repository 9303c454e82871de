from __future__ import annotations

import posixpath
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.errors import BadRequest
from proxy.core.paths import client_path, has_dot_segment, upstream_url

BASE = "https://host.example/tenant-a/v1"


@pytest.mark.parametrize(
    "raw",
    [
        b"/v1/../secret",
        b"/v1/./models",
        b"/v1/..%2F..%2Fsecret%2Fmodels",
        b"/v1/%2e%2e/secret",
        b"/v1/%2E%2e/secret",
        b"/v1/%2e/models",
        b"/v1/models/.%2E",
        b"/v1/a/%2e%2e%2f%2e%2e%2fb",
        b"/v1/a/..%5Cb",
        b"/v1/a/..;x/b",
        b"/v1/a/%2e%2e%3bjsessionid/b",
        b"/v1/..",
    ],
)
def test_dot_segments_in_any_spelling_are_refused(raw: bytes) -> None:
    with pytest.raises(BadRequest) as info:
        upstream_url(BASE, raw, b"")
    assert info.value.status == 400 and info.value.code == "invalid_path"
    assert "dot-segment" in info.value.message


@pytest.mark.parametrize(
    ("raw", "query", "expected"),
    [
        (b"/v1/models", b"", BASE + "/models"),
        (b"/v1/models", b"limit=5&after=%7e", BASE + "/models?limit=5&after=%7e"),
        (b"/v1/files/a%252Fb", b"", BASE + "/files/a%252Fb"),  # double-encoded: stays literal
        (b"/v1/%ff%c3", b"", BASE + "/%ff%c3"),  # not decoded, not replaced by U+FFFD
        (b"/v1/models/meta-llama%2FLlama-3", b"", BASE + "/models/meta-llama%2FLlama-3"),
        (b"/v1/a..b/...", b"", BASE + "/a..b/..."),  # dots inside a name are no dot-segment
        (b"/v1/chat/completions?x=1", b"x=1", BASE + "/chat/completions?x=1"),  # raw_path with query
        (b"/%76%31/models", b"", BASE + "/models"),  # an encoded 'v1' is still the proxy's prefix
        (b"/v1//models", b"", BASE + "//models"),
        (b"/v1/caf\xc3\xa9 x", b"q=\xff", BASE + "/caf%C3%A9%20x?q=%FF"),  # raw bytes: escaped, same bytes
    ],
)
def test_the_raw_path_and_query_are_forwarded_as_sent(raw: bytes, query: bytes, expected: str) -> None:
    assert upstream_url(BASE, raw, query) == expected


def test_a_bare_v1_maps_to_the_base_url() -> None:
    assert client_path(b"/v1") == ""
    assert client_path(b"/v1/") == "/"


def test_has_dot_segment_checks_base_paths_too() -> None:
    assert has_dot_segment("/allowed/../secret/v1")
    assert has_dot_segment("/allowed/%2e%2e/secret")
    assert has_dot_segment("/allowed%2F..%2Fsecret")
    assert not has_dot_segment("/allowed/v1")
    assert not has_dot_segment("/v1.5/x")


PIECES = [".", "..", "%2e", "%2E", "%2f", "%2F", "/", "%5c", "\\", ";", "a", "%25", "%252e", "v1"]


@given(st.lists(st.sampled_from(PIECES), max_size=10))
@settings(max_examples=400, deadline=None)
def test_no_accepted_path_leaves_the_base_path_however_a_server_decodes_it(pieces: list[str]) -> None:
    raw = ("/v1/" + "".join(pieces)).encode("latin-1")
    try:
        url = upstream_url(BASE, raw, b"")
    except BadRequest:
        return
    assert url.startswith(BASE)
    tail = url[len(BASE) :]
    # A server that decodes once, treats '\' as '/', drops ';params' and resolves dot-segments:
    decoded = unquote(tail).replace("\\", "/")
    decoded = "/".join(segment.split(";", 1)[0] for segment in decoded.split("/"))
    resolved = posixpath.normpath("/tenant-a/v1/" + decoded)
    assert resolved == "/tenant-a/v1" or resolved.startswith("/tenant-a/v1/"), (raw, url, resolved)
