"""Which headers travel between the client and the upstream (proxy.core.headers)."""

from __future__ import annotations

from proxy.core.headers import filter_headers


def test_hop_by_hop_and_dropped_names_go_whatever_their_case() -> None:
    pairs = [
        ("Content-Type", "application/json"),
        ("Transfer-Encoding", "chunked"),
        ("keep-alive", "timeout=5"),
        ("X-Secret", "1"),
        ("Accept", "*/*"),
    ]
    assert filter_headers(pairs, frozenset({"x-secret"})) == [
        ("Content-Type", "application/json"),
        ("Accept", "*/*"),
    ]


def test_headers_named_in_connection_go_too_wherever_they_stand() -> None:
    pairs = [
        ("X-Before", "a"),
        ("Connection", "keep-alive, X-Before , x-after"),
        ("X-After", "b"),
        ("connection", "X-Third"),
        ("x-third", "c"),
        ("X-Kept", "d"),
    ]
    assert filter_headers(pairs, frozenset()) == [("X-Kept", "d")]


def test_repeated_headers_stay_in_order_and_any_iterable_is_read_once() -> None:
    pairs = [("Set-Cookie", "a=1"), ("Host", "h"), ("set-cookie", "b=2")]
    assert filter_headers(iter(pairs), frozenset({"host"})) == [("Set-Cookie", "a=1"), ("set-cookie", "b=2")]


def test_no_headers() -> None:
    assert filter_headers([], frozenset({"host"})) == []
