"""proxy.policy.loader: the policy file read at start (`serve`, `check`) and on SIGHUP."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.core.errors import ConfigError
from proxy.core.gateway import parse_client_keys
from proxy.policy.loader import load_policy
from tests.helpers import laughs

KEYS = parse_client_keys(["alice:ck-alice"])


def refusal(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_policy(path, KEYS)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_policy_file_that_is_not_utf8_is_one_line_with_the_byte(tmp_path: Path) -> None:
    """It was a UnicodeDecodeError: a traceback from `check`, and from a SIGHUP reload."""
    path = tmp_path / "policy.yaml"
    path.write_bytes(b"keys:\n  alice: {max_level: d\xe9ep}\n")
    assert refusal(path) == f"{path}: not UTF-8: byte 28 (0xe9, line 2); save the file as UTF-8"


def test_an_alias_bomb_in_the_policy_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("keys:\n  alice: {max_level: standard}\n" + laughs(9))
    assert refusal(path).startswith(f"{path}:11: refused: its aliases would add")


def test_a_good_policy_file_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    # (an alias or two: what aliases are for)
    path.write_text("default: &rule {max_level: standard}\nkeys:\n  alice: *rule\n")
    assert load_policy(path, KEYS).rule_for("alice").max_level.value == "standard"
