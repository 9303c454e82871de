"""The one loader of the operator's YAML files."""

from __future__ import annotations

from datetime import date

import pytest

from proxy.core.errors import ConfigError
from proxy.core.yamlfile import load_config


def test_yaml_1_2_booleans_keep_words_as_strings() -> None:
    assert load_config("off: no\non: yes\nflag: true\n", "x.yaml") == {"off": "no", "on": "yes", "flag": True}


def test_a_bare_date_is_a_date_and_an_impossible_one_stays_text() -> None:
    assert load_config("a: 2026-12-02\nb: '2026-12-02'\nc: 2026-13-01\n", "x.yaml") == {
        "a": date(2026, 12, 2),
        "b": "2026-12-02",
        "c": "2026-13-01",
    }


def test_a_duplicate_key_names_the_file_and_the_key() -> None:
    with pytest.raises(ConfigError, match=r"x\.yaml: not valid YAML: .*duplicate key 'a'"):
        load_config("a: 1\na: 2\n", "x.yaml")


def test_json_reads_as_yaml_and_says_what_was_expected() -> None:
    assert load_config('{"kb_search": {"en": "Search"}}', "t.json", "YAML or JSON") == {
        "kb_search": {"en": "Search"}
    }
    with pytest.raises(ConfigError, match=r"t\.json: not valid YAML or JSON"):
        load_config("{", "t.json", "YAML or JSON")
