"""What both upstream clients share: bounded body decoding and the one error translation."""

from __future__ import annotations

import ast
import gzip
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import httpx
import pytest

from proxy.core.errors import BadUpstreamResponse, UpstreamTimeout, UpstreamUnreachable
from proxy.server.upstream.common import DECODE_PIECE_BYTES, decode_body, describe_upstream, translate_error

URL = "https://api.example.com/v1/chat/completions?key=secret"


async def pieces(*chunks: bytes) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def decoded(encoding: str, *chunks: bytes) -> list[bytes]:
    return [out async for out in decode_body(pieces(*chunks), encoding, URL)]


@pytest.mark.parametrize("encoding", ["gzip", "x-gzip", "deflate"])
async def test_decoding_is_the_same_at_every_split(encoding: str) -> None:
    body = b'{"choices": [{"message": {"content": "' + b"tides " * 50 + b'"}}]}'
    wire = gzip.compress(body) if "gzip" in encoding else zlib.compress(body)
    for i in range(len(wire) + 1):
        assert b"".join(await decoded(encoding, wire[:i], wire[i:])) == body, i


async def test_every_decoded_piece_is_bounded_however_far_a_small_read_inflates() -> None:
    wire = gzip.compress(bytes(20 * DECODE_PIECE_BYTES + 5))  # ≈ 5 KB in one read
    out = await decoded("gzip", wire)
    assert sum(map(len, out)) == 20 * DECODE_PIECE_BYTES + 5
    assert max(map(len, out)) <= DECODE_PIECE_BYTES


async def test_several_gzip_members_are_one_body() -> None:
    assert b"".join(await decoded("gzip", gzip.compress(b"one ") + gzip.compress(b"two"))) == b"one two"


@pytest.mark.parametrize(
    ("encoding", "wire"),
    [
        ("gzip", gzip.compress(b"x" * 1000)[:-8]),  # cut before its end
        ("gzip", b"\x1f\x8b\x08\x00" + b"\xff" * 30),  # corrupt
        ("deflate", b"not deflate at all"),
        ("br", b"\x0b\x02\x80hello\x03"),  # not decodable by the proxy
        ("gzip, br", b""),
    ],
)
async def test_a_body_that_cannot_be_decoded_is_a_502_naming_the_encoding(encoding: str, wire: bytes) -> None:
    with pytest.raises(BadUpstreamResponse) as caught:
        await decoded(encoding, wire)
    assert caught.value.status == 502 and encoding in caught.value.message
    assert "secret" not in caught.value.message and "api.example.com" in caught.value.message


@pytest.mark.parametrize(
    ("exc", "kind", "code"),
    [
        (httpx.ReadTimeout("t"), UpstreamTimeout, "upstream_timeout"),
        (aiohttp.SocketTimeoutError(), UpstreamTimeout, "upstream_timeout"),
        (httpx.ConnectError("refused"), UpstreamUnreachable, "upstream_unreachable"),
        (
            httpx.RemoteProtocolError("peer closed connection without sending complete message body"),
            UpstreamUnreachable,
            "upstream_protocol_error",
        ),
        (
            aiohttp.ClientPayloadError("Response payload is not completed"),
            UpstreamUnreachable,
            "upstream_protocol_error",
        ),
        (httpx.RemoteProtocolError("illegal header line"), BadUpstreamResponse, "upstream_bad_response"),
        (ConnectionResetError(), UpstreamUnreachable, "upstream_protocol_error"),
    ],
)
def test_one_translation_for_both_clients(exc: Exception, kind: type, code: str) -> None:
    error = translate_error(exc, URL)
    assert isinstance(error, kind) and error.code == code
    assert "secret" not in error.message


def test_the_two_upstream_clients_do_not_import_each_other() -> None:
    root = Path(__file__).parents[3] / "proxy" / "server" / "upstream"

    def imports(name: str) -> set[str]:
        tree = ast.parse((root / f"{name}.py").read_text())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        return found

    assert "proxy.server.upstream.httpx_client" not in imports("aiohttp_client")
    assert "proxy.server.upstream.aiohttp_client" not in imports("httpx_client")
    assert "proxy.server.upstream.httpx_client" not in imports("common")
    assert "proxy.server.upstream.aiohttp_client" not in imports("common")


@pytest.mark.parametrize(
    ("url", "described"),
    [
        ("http://user:pw@host.example:8080/v1/models?key=sk-1#f", "http://host.example:8080"),
        ("http://[::1]:11434/v1", "http://[::1]:11434"),
        ("https://api.deepseek.com/v1", "https://api.deepseek.com"),
    ],
)
def test_describe_upstream_names_scheme_host_and_port_only(url: str, described: str) -> None:
    assert describe_upstream(url) == described
