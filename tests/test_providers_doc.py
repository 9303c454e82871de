from __future__ import annotations

from pathlib import Path

import pytest

from proxy.core.config.providers import ProvidersTable
from proxy.explain import (
    BEGIN_MARK,
    END_MARK,
    README_BEGIN_MARK,
    main,
    render_entries_table,
    render_levels_table,
    render_summary_table,
    update_generated,
    update_generated_section,
)

DOC = Path(__file__).resolve().parent.parent / "docs" / "providers.md"
README = Path(__file__).resolve().parent.parent / "README.md"
TABLE = ProvidersTable.load()


def test_docs_table_is_in_step_with_providers_yaml() -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert update_generated_section(doc, TABLE) == doc, (
        "docs/providers.md is out of step with providers.yaml: run `python -m proxy.explain`"
    )


def test_readme_table_is_in_step_with_providers_yaml() -> None:
    doc = README.read_text(encoding="utf-8")
    assert README_BEGIN_MARK in doc
    assert update_generated(doc, TABLE) == doc, (
        "README.md's level table is out of step with providers.yaml: run `python -m proxy.explain`"
    )


def test_the_readme_table_has_one_row_per_entry_and_every_level() -> None:
    header, _, *rows = render_summary_table(TABLE).splitlines()
    assert header == "| entry | off | standard | deep | model overrides |"
    assert [row.split(" | ")[0] for row in rows] == [f"| **{name}**" for name in TABLE.entry_names]
    assert '| **self-hosted** | `{"chat_template_kwargs":{"enable_thinking":false}}` |' in "\n".join(rows)


def test_a_level_that_cannot_be_had_shows_its_reason() -> None:
    table = render_levels_table(TABLE)
    assert "| `kimi-k3*` | — (not applicable: kimi-k3 always reasons" in table
    assert "| `gemini-3*` | — (not applicable: Gemini 3 cannot turn thinking off" in table
    entries = render_entries_table(TABLE)
    assert 'asks `{"thinking":{"keep":"all"}}`' in entries
    assert "`skip_thought_signature_validator` where a signature is missing" in entries
    assert '`<mm:think>` (implicit open when chat_template_kwargs.thinking_mode = "enabled")' in entries


def test_every_entry_and_level_appears_in_the_levels_table() -> None:
    table = render_levels_table(TABLE)
    header, _, *rows = table.splitlines()
    assert header == "| entry | model | off | standard | deep |"
    for name in TABLE.entry_names:
        assert f"| **{name}** |" in table
    # one row per entry plus one per model override, five cells each
    overrides = sum(len(s.overrides) for s in TABLE.summaries())
    assert len(rows) == len(TABLE.entry_names) + overrides
    assert all(row.count(" | ") == 4 for row in rows)


def test_the_entries_table_shows_each_entry_s_verified_date() -> None:
    header, _, *rows = render_entries_table(TABLE).splitlines()
    assert header.endswith("| docs | verified |")
    for summary in TABLE.summaries():
        assert summary.verified is not None
        row = next(r for r in rows if r.startswith(f"| **{summary.name}** |"))
        assert row.endswith(f"| {summary.verified.isoformat()} |")
    # model override rows leave the column empty; an entry without a date shows a dash
    assert all(row.endswith("|  |  |") for row in rows if row.startswith("|  |"))
    bare = ProvidersTable.from_text(
        "providers:\n  fallback: {docs: 'https://f.example', match: ['*'], levels: {}, conflicts: [],"
        " reasoning: {tags: []}, replay: {mode: strip}}\n"
    )
    assert render_entries_table(bare).splitlines()[2].endswith("| [docs](https://f.example) | — |")


def test_prompt_levels_and_unsupported_levels_are_visible() -> None:
    table = render_levels_table(TABLE)
    assert "prompt `think_standard` | prompt `think_deep`" in table
    assert "| **minimax** | *(any)* | — (not supported) |" in table


def test_only_the_generated_section_is_replaced() -> None:
    doc = f"# Title\n\nintro\n\n{BEGIN_MARK}\nstale table\n{END_MARK}\n\noutro\n"
    updated = update_generated_section(doc, TABLE)
    assert updated.startswith(f"# Title\n\nintro\n\n{BEGIN_MARK}\n")
    assert updated.endswith(f"{END_MARK}\n\noutro\n")
    assert "stale table" not in updated
    assert update_generated_section(updated, TABLE) == updated


def test_a_doc_without_marks_is_an_error() -> None:
    with pytest.raises(ValueError):
        update_generated_section("# no marks here\n", TABLE)


def test_regeneration_rewrites_a_stale_readme(tmp_path: Path) -> None:
    stale = tmp_path / "README.md"
    stale.write_text(f"# x\n{README_BEGIN_MARK}\n| old |\n{END_MARK}\nrest\n", encoding="utf-8")
    assert main([str(stale)]) == 0
    text = stale.read_text(encoding="utf-8")
    assert "| old |" not in text and render_summary_table(TABLE) in text and text.endswith("rest\n")


def test_regeneration_rewrites_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "providers.md"
    stale.write_text(f"intro\n{BEGIN_MARK}\nold\n{END_MARK}\n", encoding="utf-8")
    assert main([str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == update_generated_section(
        f"intro\n{BEGIN_MARK}\n{END_MARK}\n", TABLE
    )
