from __future__ import annotations

import pytest

from proxy.errors import BadRequest, Forbidden
from proxy.upstream_policy import HostPattern, UpstreamPolicy, host_is_sensitive


def policy(*patterns: str, default: str | None = "https://api.deepseek.com/v1") -> UpstreamPolicy:
    return UpstreamPolicy(default, tuple(HostPattern.parse(p) for p in patterns))


def test_without_header_the_configured_upstream_is_used() -> None:
    assert policy().resolve(None) == "https://api.deepseek.com/v1"


def test_without_header_and_without_configured_upstream_is_a_clear_400() -> None:
    with pytest.raises(BadRequest, match="THINKPROXY_UPSTREAM_BASE_URL"):
        policy(default=None).resolve(None)


@pytest.mark.parametrize(
    "url",
    [
        "https://api.moonshot.cn/v1",
        "https://api.moonshot.ai/v1/",
        "https://eu.openai.azure.com/openai/deployments/x",
        "http://ark.cn-beijing.volces.com/api/v3",
    ],
)
def test_allowed_patterns(url: str) -> None:
    p = policy("api.moonshot.cn", "api.moonshot.ai", "*.openai.azure.com", "ark.cn-beijing.volces.com/api")
    assert p.resolve(url) == url.rstrip("/")


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example.com/v1",
        "https://api.moonshot.cn.evil.com/v1",
        "https://openai.azure.com.evil.com/",
        "ftp://api.moonshot.cn/v1",
        "file:///etc/passwd",
        "https://user:pw@api.moonshot.cn/v1",
        "https://ark.cn-beijing.volces.com/other",
        "api.moonshot.cn",
    ],
)
def test_refused_urls(url: str) -> None:
    p = policy("api.moonshot.cn", "*.openai.azure.com", "ark.cn-beijing.volces.com/api")
    with pytest.raises(Forbidden) as info:
        p.resolve(url)
    assert info.value.status == 403


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data",
        "http://[fd00:ec2::254]/",
        "http://127.0.0.1:11434/v1",
        "http://localhost:8000/v1",
        "http://[::1]/v1",
        "http://metadata.google.internal/computeMetadata/v1",
        "http://[::ffff:169.254.169.254]/",
        "http://0.0.0.0/",
        "http://100.100.100.200/latest/meta-data",
        "http://127.1/v1",
        "http://0x7f.1/v1",
        "http://ｌｏｃａｌｈｏｓｔ/v1",
    ],
)
def test_sensitive_hosts_refused_even_by_a_catch_all(url: str) -> None:
    with pytest.raises(Forbidden, match="explicitly"):
        policy("*").resolve(url)


def test_loopback_allowed_when_named_explicitly() -> None:
    assert policy("127.0.0.1:11434").resolve("http://127.0.0.1:11434/v1") == "http://127.0.0.1:11434/v1"
    with pytest.raises(Forbidden):
        policy("127.0.0.1:11434").resolve("http://127.0.0.1:2375/v1")


def test_host_is_sensitive() -> None:
    assert host_is_sensitive("169.254.1.1") and host_is_sensitive("LOCALHOST")
    assert not host_is_sensitive("api.openai.com") and not host_is_sensitive("8.8.8.8")


def test_bad_pattern_is_a_startup_error() -> None:
    import pytest as _pytest

    from proxy.errors import ConfigError

    with _pytest.raises(ConfigError, match="invalid port"):
        HostPattern.parse("api.example.com:http")


def test_malformed_url_is_refused_not_crashed() -> None:
    with pytest.raises(Forbidden, match="not a valid URL"):
        policy("*").resolve("http://[::1")
