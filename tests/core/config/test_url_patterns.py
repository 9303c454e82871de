"""proxy.core.config.url_patterns: one syntax for providers.yaml and the allow-list, two ways of matching."""

from __future__ import annotations

import pytest

from proxy.core.config.url_patterns import UrlPattern, UrlTarget, scrub_urls


def t(url: str) -> UrlTarget:
    return UrlTarget.parse(url)


@pytest.mark.parametrize(
    ("pattern", "url", "matches", "admits"),
    [
        ("api.x.ai", "https://api.x.ai/v1", True, True),
        ("api.x.ai", "https://api.x.ai:8443/v1", True, False),  # lookup ignores an unnamed port
        ("https://api.x.ai", "http://api.x.ai/v1", True, False),  # lookup ignores the scheme
        ("api.x.ai:8443", "https://api.x.ai:8443/v1", True, True),
        ("api.x.ai:8443", "https://api.x.ai/v1", False, False),
        ("api.x.ai:*", "https://api.x.ai:1/v1", True, True),
        ("*.openai.azure.com", "https://eu.openai.azure.com/openai", True, True),
        ("*.openai.azure.com", "https://a.b.openai.azure.com/openai", True, True),
        ("*.openai.azure.com", "https://openai.azure.com/", False, False),
        ("ark.*.volces.com", "https://ark.cn-beijing.volces.com/api/v3", True, True),
        ("ark.*.volces.com", "https://ark.a.b.volces.com/api/v3", False, False),
        ("[::1]:11434", "http://[::1]:11434/v1", True, True),
        ("[::1]:11434", "http://[0:0:0:0:0:0:0:1]:11434/v1", True, True),
        ("[::1]", "http://[::2]/v1", False, False),
        ("host.example/compatible-mode", "https://host.example/compatible-mode/v1", True, True),
        ("host.example/compatible-mode", "https://host.example/compatible-modes/v1", False, False),
        ("host.example/a%20b", "https://host.example/a b/v1", True, True),
        ("*", "https://anything.example/v1", True, True),
        ("*", "https://anything.example:8443/v1", True, False),
        ("*:11434", "http://ollama:11434/v1", True, True),
        ("*:11434", "http://gpu-box.lan:11434/v1", True, True),
        ("*:11434", "http://ollama:8080/v1", False, False),
    ],
)
def test_one_syntax_two_ways_of_matching(pattern: str, url: str, matches: bool, admits: bool) -> None:
    p = UrlPattern.parse(pattern)
    assert p.matches(t(url)) is matches
    assert p.admits(t(url)) is admits


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("", "empty"),
        ("ftp://host", "scheme"),
        ("::1:11434", "brackets"),
        ("[::1", "unclosed"),
        ("[nope]", "IPv6"),
        ("api*.x.ai", "whole label"),
        ("*.*", "literal label"),
        ("*:*", "literal label"),
        ("host:0", "port"),
        ("host:http", "port"),
        ("host/a/*", "literal"),
        ("host/a/../b", "dot-segment"),
        ("user@host", "credentials"),
        ("host?x=1", "query"),
        ("bad_label!.com", "host label"),
    ],
)
def test_bad_patterns_are_refused_with_a_reason(text: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        UrlPattern.parse(text)


def test_exact_patterns_name_one_host() -> None:
    assert UrlPattern.parse("10.0.0.5:8000").exact
    assert UrlPattern.parse("[fd00::1]").exact
    assert not UrlPattern.parse("*.example.com").exact
    assert not UrlPattern.parse("*").exact


def test_hosts_are_compared_in_one_spelling() -> None:
    assert t("https://ＡＰＩ.x.ai./v1").host == "api.x.ai"
    assert t("https://bücher.example/v1").host == "xn--bcher-kva.example"
    assert UrlPattern.parse("bücher.example").admits(t("https://BÜCHER.example/v1"))


@pytest.mark.parametrize(
    ("text", "scrubbed"),
    [
        (
            "407, message='Proxy Authentication Required', url='http://corp:pw@10.0.0.1:3128'",
            "407, message='Proxy Authentication Required', url='http://10.0.0.1:3128'",
        ),
        ("Invalid URL https://host/v1/models?key=sk-1#frag here", "Invalid URL https://host/v1/models here"),
        ("no url at all", "no url at all"),
    ],
)
def test_scrub_urls_cuts_credentials_and_queries_from_messages(text: str, scrubbed: str) -> None:
    assert scrub_urls(text) == scrubbed
