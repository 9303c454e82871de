"""Settings: the configured upstream base URL is checked at start-up and never leaks a secret."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.helpers import make_settings


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("http://user:hunter2@api.example.com/v1", "credentials"),
        ("https://:hunter2@api.example.com/v1", "credentials"),
        ("https://api.example.com/v1?key=hunter2", "query"),
        ("https://api.example.com/v1#hunter2", "query string or fragment"),
        ("https://api.example.com/tenant/../hunter2/v1", "'..'"),
        ("https://api.example.com/tenant/%2e%2e/hunter2/v1", "'..'"),
        ("ftp://api.example.com/hunter2", "http:// or https://"),
        ("https://api.example.com:99999/hunter2", "valid URL"),
    ],
)
def test_a_base_url_with_secrets_or_dot_segments_is_refused_without_echoing_it(
    url: str, complaint: str
) -> None:
    with pytest.raises(ValidationError) as info:
        make_settings(upstream_base_url=url)
    messages = [err["msg"] for err in info.value.errors()]
    assert any(complaint in m for m in messages), messages
    assert not any("hunter2" in m for m in messages)


@pytest.mark.parametrize(
    ("url", "normalized"),
    [
        ("https://api.deepseek.com/v1/", "https://api.deepseek.com/v1"),
        ("  HTTPS://API.DeepSeek.com/v1", "https://api.deepseek.com/v1"),
        ("https://bücher.example/v1", "https://xn--bcher-kva.example/v1"),
        ("http://[::1]:11434/v1", "http://[::1]:11434/v1"),
        ("https://host.example/my models/v1", "https://host.example/my%20models/v1"),
        ("https://host.example/a%2Fb/v1", "https://host.example/a%2Fb/v1"),
        ("", None),
    ],
)
def test_the_base_url_is_normalized(url: str, normalized: str | None) -> None:
    assert make_settings(upstream_base_url=url).upstream_base_url == normalized


def test_serve_refuses_a_base_url_with_credentials_and_prints_no_secret(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxy.cli import main

    monkeypatch.chdir("/")  # (no .env file from the working directory)
    # `serve` exports its flags as environment for its workers: set-then-delete makes monkeypatch
    # restore each of them after the test.
    for name in ("THINKPROXY_UPSTREAM_BASE_URL", "THINKPROXY_ALLOWED_UPSTREAMS", "THINKPROXY_PORT"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    code = main(["serve", "--upstream", "http://user:hunter2@api.example.com/v1?key=hunter3", "--port", "0"])
    err = capsys.readouterr().err
    assert code == 2
    assert "THINKPROXY_UPSTREAM_BASE_URL" in err and "credentials" in err
    assert "hunter2" not in err and "hunter3" not in err
