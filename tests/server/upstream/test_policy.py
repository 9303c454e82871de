from __future__ import annotations

import pytest

from proxy.core.errors import BadRequest, ConfigError, Forbidden
from proxy.server.upstream.policy import UpstreamPolicy, host_is_sensitive, parse_allowed


def policy(*patterns: str, default: str | None = "https://api.deepseek.com/v1") -> UpstreamPolicy:
    return UpstreamPolicy(default, tuple(parse_allowed(p) for p in patterns))


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
    with pytest.raises(Forbidden, match="named exactly"):
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

    from proxy.core.errors import ConfigError

    with _pytest.raises(ConfigError, match=r"THINKPROXY_ALLOWED_UPSTREAMS: .*port 'http'"):
        parse_allowed("api.example.com:http")


def test_malformed_url_is_refused_not_crashed() -> None:
    with pytest.raises(Forbidden, match="not a valid absolute"):
        policy("*").resolve("http://[::1")


# ---- the pattern's scheme, its port, dot-segments ------------------------------------------------


def test_a_pattern_with_a_scheme_admits_only_that_scheme() -> None:
    p = policy("https://api.example.com")
    assert p.resolve("https://api.example.com/v1") == "https://api.example.com/v1"
    with pytest.raises(Forbidden, match="not allowed"):
        p.resolve("http://api.example.com/v1")  # the key would travel in clear text


@pytest.mark.parametrize(
    ("pattern", "url", "admitted"),
    [
        ("api.example.com", "https://api.example.com/v1", True),
        ("api.example.com", "https://api.example.com:443/v1", True),
        ("api.example.com", "http://api.example.com/v1", True),
        ("api.example.com", "https://api.example.com:8443/v1", False),
        ("api.example.com", "http://api.example.com:443/v1", False),
        ("https://api.example.com", "https://api.example.com:80/v1", False),
        ("api.example.com:8443", "https://api.example.com:8443/v1", True),
        ("api.example.com:8443", "https://api.example.com/v1", False),
        ("api.example.com:*", "http://api.example.com:6379/", True),
        ("*.example.com", "https://eu.api.example.com/v1", True),
        ("*.example.com", "https://eu.api.example.com:2375/v1", False),
        ("*", "https://anything.example.org/v1", True),
        ("*", "http://anything.example.org:6379/", False),
    ],
)
def test_a_pattern_without_a_port_means_the_default_port(pattern: str, url: str, admitted: bool) -> None:
    p = policy(pattern)
    if admitted:
        assert p.resolve(url).startswith(url.split("/v1")[0].rstrip("/"))
    else:
        with pytest.raises(Forbidden):
            p.resolve(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://host.example/allowed/../secret/v1",
        "https://host.example/allowed/%2e%2e/secret",
        "https://host.example/allowed/%2E%2e/secret",
        "https://host.example/allowed%2F..%2Fsecret",
        "https://host.example/allowed/./v1",
    ],
)
def test_dot_segments_in_a_chosen_base_path_are_refused_before_matching(url: str) -> None:
    with pytest.raises(BadRequest) as info:
        policy("host.example/allowed").resolve(url)
    assert info.value.status == 400 and info.value.param == "X-Upstream-Base-URL"
    assert "dot-segment" in info.value.message


def test_the_path_prefix_is_compared_after_percent_decoding() -> None:
    p = policy("host.example/allowed")
    assert p.resolve("https://host.example/%61llowed/v1") == "https://host.example/%61llowed/v1"
    with pytest.raises(Forbidden):
        p.resolve("https://host.example/allowedx/v1")


@pytest.mark.parametrize("url", ["https://api.example.com/v1?key=secret", "https://api.example.com/v1#x"])
def test_a_chosen_base_url_with_a_query_or_fragment_is_refused(url: str) -> None:
    with pytest.raises(Forbidden, match="query or fragment"):
        policy("api.example.com").resolve(url)


# ---- private ranges and IPv6 ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.5/v1",
        "http://172.16.3.4/v1",
        "http://192.168.1.1/v1",
        "http://100.64.0.1/v1",
        "http://[fd12:3456::1]/v1",
        "http://[fc00::1]/v1",
        "http://[::ffff:10.0.0.5]/v1",
        "http://[64:ff9b::a00:5]/v1",
        "http://0.1.2.3/v1",
    ],
)
def test_private_ranges_are_sensitive_like_loopback(url: str) -> None:
    with pytest.raises(Forbidden, match="named exactly"):
        policy("*").resolve(url)


def test_a_private_address_is_reached_by_an_exact_pattern_only() -> None:
    assert policy("10.0.0.5").resolve("http://10.0.0.5/v1") == "http://10.0.0.5/v1"
    with pytest.raises(Forbidden):
        policy("10.0.*.*").resolve("http://10.0.0.5/v1")


def test_a_bracketed_ipv6_pattern_works() -> None:
    p = policy("[::1]:11434")
    assert p.resolve("http://[::1]:11434/v1") == "http://[::1]:11434/v1"
    assert p.resolve("http://[0:0::1]:11434/v1") == "http://[::1]:11434/v1"
    with pytest.raises(Forbidden):
        p.resolve("http://[::1]:2375/v1")
    with pytest.raises(ConfigError, match="brackets"):
        parse_allowed("::1:11434")


def test_names_exactly_is_what_the_connection_guard_trusts() -> None:
    p = policy("ollama:11434", "*.example.com", "models.internal")
    assert p.names_exactly("ollama", 11434) and p.names_exactly("OLLAMA", 11434)
    assert not p.names_exactly("ollama", 2375)
    assert p.names_exactly("models.internal", 443)
    assert not p.names_exactly("api.example.com", 443)


def test_an_idn_host_is_sent_in_ascii() -> None:
    assert policy("*").resolve("https://bücher.example/v1") == "https://xn--bcher-kva.example/v1"


def test_the_providers_table_and_the_allow_list_read_the_same_patterns() -> None:
    from proxy.core.config.providers import ProvidersTable

    table = ProvidersTable.load().with_extra_patterns(
        "deepseek", ["[::1]:11434", "http://127.0.0.1:11435/ds"]
    )
    assert table.match("http://[::1]:11434/v1").name == "deepseek"
    assert table.match("http://127.0.0.1:11435/ds/v1").name == "deepseek"
    assert policy("[::1]:11434", "http://127.0.0.1:11435/ds").resolve("http://127.0.0.1:11435/ds/v1")
