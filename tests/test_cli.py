"""`thinkproxy check` (proxy.cli): every file the proxy would read is checked as `serve` reads it, and
any fault is exit 1 with one line per fault — never a traceback, never a 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cli import main
from proxy.core.config.providers import default_providers_path
from tests.helpers import laughs

NOT_UTF8 = b"keys:\n  alice: {max_level: d\xe9ep}\n"
BOMB = "keys:\n  alice: {max_level: standard}\n" + laughs(9)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("THINKPROXY_POLICY_FILE", "THINKPROXY_ROUTES_FILE", "THINKPROXY_TOOL_TITLES_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("THINKPROXY_CLIENT_KEYS", "alice:ck-alice")
    monkeypatch.chdir(tmp_path)  # (no .env of the checkout's)


def check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["check", *args])
    return code, capsys.readouterr().err


def check_out(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["check", *args])
    out, err = capsys.readouterr()
    return code, out, err


def one_fault(err: str, *said: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("thinkproxy: "), err
    for part in said:
        assert part in lines[0]


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (NOT_UTF8, "policy.yaml: not UTF-8: byte 28 (0xe9, line 2)"),
        (BOMB.encode(), "policy.yaml:11: refused"),
    ],
    ids=["not-utf8", "alias-bomb"],
)
def test_check_refuses_a_bad_policy_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, said: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_bytes(content)
    code, err = check(capsys, "--policy", str(path))
    assert code == 1
    one_fault(err, said)


def test_check_refuses_bad_providers_and_routes_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    providers = tmp_path / "providers.yaml"
    providers.write_text(default_providers_path().read_text() + laughs(9))
    code, err = check(capsys, str(providers))
    assert code == 1
    one_fault(err, "providers.yaml:", "refused: its aliases would add")
    routes = tmp_path / "routes.yaml"
    routes.write_bytes(b"routes:\n  - {name: a\xff, models: ['*'], upstream: 'http://x/v1'}\n")
    code, err = check(capsys, "--routes", str(routes))
    assert code == 1
    one_fault(err, "routes.yaml: not UTF-8: byte 20 (0xff, line 2)")


def test_check_reads_the_tool_titles_file_as_serve_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    titles = tmp_path / "titles.yaml"
    titles.write_text(laughs(9))
    monkeypatch.setenv("THINKPROXY_TOOL_TITLES_FILE", str(titles))
    code, err = check(capsys)
    assert code == 1
    one_fault(err, "THINKPROXY_TOOL_TITLES_FILE: ", "titles.yaml:9: refused")
    titles.write_text("kb_search: {en: Searching the knowledge base}\n")
    code, out, err = check_out(capsys)
    assert (code, err) == (0, "")
    assert f"{titles}: OK (1 tool title(s))" in out
