"""The one loader of the operator's YAML files."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from pathlib import Path

import pytest

from proxy.core.config.providers import ProvidersTable
from proxy.core.config.routing import RouteTable
from proxy.core.config.tool_titles import load_tool_titles
from proxy.core.config.yamlfile import decode_config, load_config
from proxy.core.errors import ConfigError
from tests.helpers import laughs


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


# -- what a file may cost: aliases, nesting, bytes -------------------------------------------------


def refusal(text: str, source: str = "x.yaml") -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(text, source)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(source)
    return message


def test_an_alias_bomb_is_refused_in_one_line_naming_the_file_and_the_alias() -> None:
    message = refusal(laughs(9))  # a billion nodes once expanded
    assert message.startswith("x.yaml:9: refused: its aliases would add 1,234,567,880 nodes")
    assert "(the largest: *a7)" in message


def test_a_few_aliases_still_load() -> None:
    """Anchors for settings shared by several entries are what aliases are for."""
    shared = "base: &base {max_level: standard, on_exhausted: refuse}\n"
    text = shared + "".join(f"k{i}: *base\n" for i in range(200)) + "m: {<<: *base, max_level: deep}\n"
    document = load_config(text, "x.yaml")
    assert document["k199"] == {"max_level": "standard", "on_exhausted": "refuse"}
    assert document["m"] == {"max_level": "deep", "on_exhausted": "refuse"}
    assert load_config(laughs(3), "x.yaml")["a2"][9][9][9] == "lol"  # 1,110 more nodes: within the bound


def test_merge_keys_are_counted_like_any_alias() -> None:
    lines = ["m0: &m0 {" + ", ".join(f"k{i}: v" for i in range(10)) + "}"]
    lines += [f"m{i}: &m{i} [{', '.join([f'*m{i - 1}'] * 10)}]" for i in range(1, 4)]
    lines.append("top: {<<: [*m3, *m3, *m3]}")
    assert "refused: its aliases would add" in refusal("\n".join(lines))


def test_aliases_of_a_long_string_are_bounded_too() -> None:
    text = f"s: &s {'x' * 200_000}\nt: [{', '.join(['*s'] * 10)}]\n"
    assert "its aliases would add 2,000,000 characters (at most 1,000,000)" in refusal(text)


def test_an_alias_inside_its_own_anchor_is_refused() -> None:
    message = refusal("a: 1\nloop: &me [1, *me]\n")
    assert message == (
        "x.yaml:2: refused: the alias *me stands inside its own anchor: the document would never end"
    )


def test_nesting_past_the_depth_bound_is_one_line() -> None:
    assert load_config("[" * 60 + "]" * 60, "x.yaml") is not None
    assert refusal("[" * 5000 + "]" * 5000) == "x.yaml:1: refused: nested more than 64 levels deep"


def test_a_syntax_error_is_one_line_with_its_line_and_column() -> None:
    assert refusal("a: b\n c: d: e\n") == (
        "x.yaml: not valid YAML: mapping values are not allowed here (line 2, column 3)"
    )


def test_bytes_that_are_not_utf8_are_one_line_with_the_byte_offset() -> None:
    assert decode_config("a: café\n".encode(), "x.yaml") == "a: café\n"
    with pytest.raises(ConfigError) as caught:
        decode_config(b"a: 1\nb: caf\xe9\n", "p.yaml")
    assert str(caught.value) == "p.yaml: not UTF-8: byte 11 (0xe9, line 2); save the file as UTF-8"


# -- every file the proxy reads goes through them -------------------------------------------------


def _providers(path: Path) -> object:
    return ProvidersTable.load(path)


def _routes(path: Path) -> object:
    return RouteTable.load(path)


LOADERS = {"providers": _providers, "routes": _routes, "tool titles": load_tool_titles}


@pytest.mark.parametrize("loader", LOADERS.values(), ids=list(LOADERS))
def test_every_config_file_refuses_bad_bytes_and_alias_bombs_in_one_line(
    loader: Callable[[Path], object], tmp_path: Path
) -> None:
    path = tmp_path / "file.yaml"
    path.write_bytes(b"a: 1\n\xff\xfe: 2\n")
    with pytest.raises(ConfigError) as caught:
        loader(path)
    assert str(caught.value).startswith(f"{path}: not UTF-8: byte 5 (0xff, line 2)")
    path.write_text(laughs(9))
    with pytest.raises(ConfigError) as caught:
        loader(path)
    message = str(caught.value)
    assert "\n" not in message and "file.yaml:9: refused: its aliases would add" in message
