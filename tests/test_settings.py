"""Settings: the configured upstream base URL is checked at start-up and never leaks a secret."""

from __future__ import annotations

from typing import Any

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


# Settings that take any text (keys, tool-name globs, a secret): nothing to check beyond the rules
# their consumers apply. Every other setting refuses a value that makes no sense for it.
TAKES_ANY_TEXT = {
    "client_keys",
    "admin_keys",
    "reviewer_keys",
    "state_secret",
    "state_old_secrets",
    "review_tools",
}


def _serve_with(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], env: dict[str, str]
) -> tuple[int, str]:
    import proxy.cli
    from proxy.settings import Settings

    monkeypatch.chdir("/")  # (no .env file from the working directory)
    monkeypatch.setattr(proxy.cli, "_run_uvicorn", lambda settings: None)  # (cli is not compiled)
    for name in Settings.model_fields:
        monkeypatch.delenv(f"THINKPROXY_{name.upper()}", raising=False)
    for name, value in {"THINKPROXY_UPSTREAM_BASE_URL": "https://api.deepseek.com/v1", **env}.items():
        monkeypatch.setenv(name, value)
    code = proxy.cli.main(["serve", "--port", "0"])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("junk", ["not a value!", "-5"])
def test_every_bad_setting_is_one_line_naming_its_variable(
    junk: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxy.settings import Settings

    for name in Settings.model_fields:
        variable = f"THINKPROXY_{name.upper()}"
        if name == "port":
            continue  # (the flag above sets it)
        code, err = _serve_with(monkeypatch, capsys, {variable: junk})
        assert "Traceback" not in err, (variable, err)
        if name in TAKES_ANY_TEXT:
            continue
        assert code == 2, (variable, err)
        named = [line for line in err.splitlines() if variable in line]
        assert named, (variable, err)


def test_a_redis_url_that_is_not_one_is_refused_without_quoting_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for url in ("notaurl", "redis://:hunter2@host:notaport/0", "http://redis:6379"):
        code, err = _serve_with(monkeypatch, capsys, {"THINKPROXY_STATE_URL": url})
        assert code == 2 and "THINKPROXY_STATE_URL: is not a Redis URL" in err, err
        assert "hunter2" not in err and "Traceback" not in err
        assert len([line for line in err.splitlines() if "STATE_URL" in line]) == 1


def test_a_misspelled_variable_is_a_warning_naming_the_closest_setting(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxy.settings import unknown_variables

    code, err = _serve_with(
        monkeypatch, capsys, {"THINKPROXY_ADMIN_KEY": "x", "THINKPROXY_UPSTREAM_BASEURL": "y"}
    )
    assert code == 0
    assert (
        "warning: THINKPROXY_ADMIN_KEY is not a setting and is ignored (did you mean THINKPROXY_ADMIN_KEYS?)"
        in err
    )
    assert "(did you mean THINKPROXY_UPSTREAM_BASE_URL?)" in err
    assert unknown_variables(["THINKPROXY_PORT", "thinkproxy_trace", "THINKPROXY_COMPILE", "PATH"]) == []
    assert unknown_variables(["THINKPROXY_ZZZ"]) == ["THINKPROXY_ZZZ is not a setting and is ignored"]


def test_a_route_key_variable_named_like_a_setting_is_not_called_a_typo(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text(
        'routes:\n  - {name: ds, models: ["*"], upstream: "https://api.deepseek.com/v1", '
        "api_key_env: THINKPROXY_DS_KEY}\n"
    )
    env = {"THINKPROXY_ROUTES_FILE": str(routes), "THINKPROXY_DS_KEY": "sk-1", "THINKPROXY_X": "1"}
    code, err = _serve_with(monkeypatch, capsys, env)
    assert code == 0, err
    assert "THINKPROXY_DS_KEY" not in err and "THINKPROXY_X is not a setting" in err


def test_workers_of_one_serve_share_a_drawn_secret_unless_one_is_set() -> None:
    """A sealed blob made by one worker must open in another (proxy.cli.share_worker_secret)."""
    from pydantic import SecretStr

    from proxy.cli import share_worker_secret

    environ: dict[str, str] = {}
    share_worker_secret(make_settings(workers=2), environ)
    assert len(environ["THINKPROXY_STATE_SECRET"]) >= 40
    for settings in (
        make_settings(workers=1),
        make_settings(workers=2, state_secret=SecretStr("set")),
        make_settings(workers=2, state_url=SecretStr("redis://127.0.0.1:6379/0")),
    ):
        untouched: dict[str, str] = {}
        share_worker_secret(settings, untouched)
        assert untouched == {}
