"""Human-readable explanations of the providers table: what one request becomes, and the docs table.

Pure: `explain` and `render_levels_table` / `render_entries_table` / `update_generated_section` take
values and return text. Only `main` (run as `python -m proxy.explain`) reads and writes files: it
regenerates the tables in docs/providers.md and the README's level × provider table from
providers.yaml; and `auto_rules_in` reads a policy file's auto rules for `thinkproxy explain --policy`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from proxy.core.config.policy_file import parse_policy
from proxy.core.config.providers import (
    Dialect,
    EntrySummary,
    ProvidersTable,
    default_providers_path,
)
from proxy.core.config.providers_schema import LevelRule
from proxy.core.config.routing import RouteTable
from proxy.core.config.yamlfile import decode_config, load_config
from proxy.core.controls import Level
from proxy.core.errors import ConfigError
from proxy.core.plan.levels import Asked, LevelAsk, LevelChoice, Source, decide
from proxy.core.plan.model_suffix import AUTO, split_model
from proxy.core.plan.rewrite import rewrite_body
from proxy.core.policy.auto_rules import BUILT_IN, AutoRule, features_of
from proxy.core.policy.body_level import knobs_level

DEFAULT_QUESTION = "What is 17 × 23? Answer with the number."


def default_body(model: str | None) -> dict[str, Any]:
    """The small request explained when the caller gives none."""
    return {
        "model": model or "example-model",
        "messages": [{"role": "user", "content": DEFAULT_QUESTION}],
        "stream": True,
    }


def explain(
    table: ProvidersTable,
    base_url: str,
    level: Level | str | None,
    model: str | None = None,
    body: dict[str, Any] | None = None,
    zh: bool = False,
    rules: Sequence[AutoRule] = BUILT_IN,
) -> str:
    """The matched entry, its docs, the level and method applied, and the exact upstream JSON body.

    `model` defaults to the body's `model`; a `(level)` suffix on it is taken off and read as a
    request's would be (proxy.core.plan.model_suffix). `level` is what X-Thinking-Level would say:
    off, standard, deep or auto (ValueError otherwise); `auto` (from the level or the suffix) is
    chosen by `rules` (the policy file's, else the built-in ones), and the rule that chose is shown.
    """
    header = _asked(level)
    if model is None and body is not None and isinstance(body.get("model"), str):
        model = body["model"]
    suffix = split_model(model)
    if suffix is not None:
        model = suffix.model
    request = dict(body) if body is not None else default_body(model)
    if suffix is not None and isinstance(request.get("model"), str):
        request["model"] = model
    dialect = table.match(base_url, model)
    choice = decide(
        LevelAsk(header, suffix, None, rules),
        knobs_level(request, dialect),
        lambda: features_of("chat", "chat", request, model or "", ""),
    )
    lvl = None if choice.source is Source.CLIENT else choice.level
    result = rewrite_body(request, lvl, dialect, zh=zh)

    override = f" (model override: {', '.join(dialect.model_override)})" if dialect.model_override else ""
    shown = model if model is not None else "(none given)"
    if suffix is not None:
        shown += f" (suffix ({suffix.word}) taken off)"
    lines = [
        f"Upstream:   {base_url}",
        f"Entry:      {dialect.name} (matched by {table.matched_pattern(base_url)!r}){override}",
        f"Model:      {shown}",
        f"Docs:       {dialect.docs}",
        f"Source:     {_source_line(choice)}",
    ]
    if choice.rule is not None:
        lines.append(f"Auto rule:  {choice.rule}")
    lines.append(f"Level:      {_level_line(lvl, result.level_applied, result.method, dialect)}")
    if lvl is not None and result.level_applied is not None:
        lines.append(f"Removed:    {', '.join(dialect.conflicts) or '(nothing)'} (if the client sent them)")
    lines.append(f"Reasoning:  {_reasoning_line(dialect)}")
    lines.append(f"Replay:     {_replay_line(dialect)}")
    if result.method == "prompt":
        lines.append("Injected:   system message at position 0 (never shown to the client):")
        lines.extend(f"    {line}" for line in str(result.body["messages"][0]["content"]).splitlines())
    lines.append("Upstream body:")
    lines.append(orjson.dumps(result.body, option=orjson.OPT_INDENT_2).decode())
    return "\n".join(lines) + "\n"


def auto_rules_in(path: Path) -> tuple[AutoRule, ...]:
    """The auto rules of the policy file at `path` (the built-in ones when it has none); a file
    that is wrong is the ConfigError `serve` would refuse it with (its keys are taken as named)."""
    try:
        text = decode_config(path.read_bytes(), str(path))
    except OSError as exc:
        raise ConfigError(f"cannot read the policy file {path}: {exc.strerror or exc}") from None
    document = load_config(text, str(path), "YAML")
    keys = document.get("keys") if isinstance(document, dict) else None
    names = list(keys) if isinstance(keys, dict) else []
    return parse_policy(text, str(path), names).auto or BUILT_IN


def _asked(level: Level | str | None) -> Asked | None:
    if isinstance(level, Level):
        return Asked(level)
    if level is None:
        return None
    word = level.strip().lower()
    return Asked(None, auto=True) if word == AUTO else Asked(Level(word))


def _source_line(choice: LevelChoice) -> str:
    if choice.source is None:
        return "none (no --level, no model suffix, no knob in the body: the upstream's default)"
    what = {
        Source.HEADER: "--level (as X-Thinking-Level)",
        Source.SUFFIX: "the model's suffix",
        Source.CLIENT: "the body's own knobs (they go as they came)",
        Source.DEFAULT: "the default level",
    }[choice.source]
    return f"{choice.source.value}: {what}"


def explain_routed(
    table: ProvidersTable,
    routes: RouteTable,
    level: Level | str | None,
    model: str | None = None,
    body: dict[str, Any] | None = None,
    zh: bool = False,
    rules: Sequence[AutoRule] = BUILT_IN,
) -> str:
    """`explain` for a proxy with a routes file: the route the model picks (by its name without a
    level suffix), then the entry and the exact body that route's upstream receives (a prefix
    route's prefix stripped from `model`). Raises the 404 `NotFound` a request would get when no
    route takes the model."""
    if model is None and body is not None and isinstance(body.get("model"), str):
        model = body["model"]
    request = dict(body) if body is not None else default_body(model)
    if model is None:  # route the example body's model, as a request would be
        model = request.get("model") if isinstance(request.get("model"), str) else None
    suffix = split_model(model)
    routed = suffix.model if suffix is not None else model
    destination = routes.destination(routed)
    assert destination.route is not None
    sent_model = destination.model if destination.model is not None else routed
    if sent_model is not None:
        request["model"] = sent_model
    head = f"Route:      {routes.describe(destination.route)}\n"
    if destination.model is not None:
        head += f"Model sent: {destination.model} (client asked for {routed})\n"
    written = f"{sent_model}({suffix.word})" if suffix is not None else sent_model
    return head + explain(table, destination.base_url, level, model=written, body=request, zh=zh, rules=rules)


def _level_line(requested: Level | None, applied: Level | None, method: str | None, dialect: Dialect) -> str:
    if requested is None:
        return "none requested -> body forwarded unchanged (the original bytes)"
    if applied is None:
        reason = dialect.not_applicable.get(requested)
        why = f"not applicable: {reason}" if reason else f"{dialect.name} has no rule for {requested.value!r}"
        return f"{requested.value} -> applied: none ({why}; no thinking knob is sent)"
    rule = dialect.levels[applied]
    how = f"prompt {rule.prompt!r}" if method == "prompt" else _params_text(rule)
    return f"{requested.value} -> applied: {applied.value} (method: {method}; {how})"


def _reasoning_line(dialect: Dialect) -> str:
    tags = ", ".join(f"<{t}>" for t in dialect.reasoning.tags)
    inline = f"; inline {tags}" if tags else ""
    implicit = " (template opens the first tag)" if dialect.reasoning.implicit_open else ""
    when = dialect.reasoning.implicit_open_when
    if when:
        implicit = " (template opens the first tag when " + _conditions(when) + ")"
    always = (
        "; the model always reasons (an answer without reasoning is counted)"
        if dialect.reasoning.always
        else ""
    )
    return f"reasoning_content / reasoning fields{inline}{implicit}{always}"


def _conditions(when: dict[str, Any]) -> str:
    return ", ".join(f"{path} = {orjson.dumps(value).decode()}" for path, value in when.items())


def _replay_line(dialect: Dialect) -> str:
    mode, field = dialect.replay.mode, dialect.replay.field
    if mode == "strip":
        skip = (
            "; a missing thought signature gets skip_thought_signature_validator"
            if dialect.replay.missing_signature == "skip_validator"
            else ""
        )
        return f"strip (reasoning removed from assistant messages in the history{skip})"
    where = "assistant messages with tool_calls" if mode == "tool_calls" else "assistant messages"
    miss = "; not remembered: empty placeholder" if dialect.replay.missing == "placeholder" else ""
    keep = _keep_text(dialect)
    asks = f"; with a level other than off and earlier turns: {keep}" if keep else ""
    return f"{mode} (reasoning kept on {where}, as {field}; stripped elsewhere{miss}{asks})"


def _keep_text(dialect: Dialect) -> str:
    return orjson.dumps(dialect.replay.params).decode() if dialect.replay.params else ""


def _params_text(rule: LevelRule) -> str:
    if not rule.params:
        return "nothing to send: the model's default"
    return orjson.dumps(rule.params).decode()


# --------------------------------------------------------------------------------------------------
# docs/providers.md tables
# --------------------------------------------------------------------------------------------------

BEGIN_MARK = "<!-- BEGIN GENERATED: python -m proxy.explain -->"
END_MARK = "<!-- END GENERATED -->"


def _cell(rule: LevelRule | None, reason: str | None = None) -> str:
    if rule is None:
        return f"— (not applicable: {_escaped(reason)})" if reason else "— (not supported)"
    if rule.prompt is not None:
        return f"prompt `{rule.prompt}`"
    if not rule.params:
        return "`{}` (default)"
    return "`" + _escaped(orjson.dumps(rule.params).decode()) + "`"


def _escaped(text: str) -> str:
    return text.replace("|", "\\|")


def _rows(summary: EntrySummary) -> list[tuple[str, str, Dialect]]:
    rows = [(summary.name, "*(any)*", summary.dialect)]
    for dialect in summary.overrides:
        globs = ", ".join(f"`{g}`" for g in dialect.model_override or ())
        rows.append(("", globs, dialect))
    return rows


def render_levels_table(table: ProvidersTable) -> str:
    """Markdown: every entry (and model override) × level -> what is sent."""
    out = ["| entry | model | off | standard | deep |", "|---|---|---|---|---|"]
    for summary in table.summaries():
        for name, models, dialect in _rows(summary):
            cells = [_cell(dialect.levels.get(level), dialect.not_applicable.get(level)) for level in Level]
            out.append(f"| {f'**{name}**' if name else ''} | {models} | {' | '.join(cells)} |")
    return "\n".join(out)


def render_entries_table(table: ProvidersTable) -> str:
    """Markdown: every entry -> its patterns, reasoning format, replay policy, docs and the date
    the docs were last re-read against it (`verified`, "—" when the entry has none)."""
    out = [
        "| entry | matches | reasoning (inline tags) | replay | docs | verified |",
        "|---|---|---|---|---|---|",
    ]
    for summary in table.summaries():
        for name, models, dialect in _rows(summary):
            if name:
                matches = "<br>".join(f"`{p}`" for p in summary.patterns)
                docs = f"[docs]({summary.docs})"
                verified = summary.verified.isoformat() if summary.verified else "—"
            else:
                matches, docs, verified = f"model {models}", "", ""
            tags = ", ".join(f"`<{t}>`" for t in dialect.reasoning.tags) or "—"
            if dialect.reasoning.implicit_open:
                tags += " (implicit open)"
            elif dialect.reasoning.implicit_open_when:
                tags += f" (implicit open when {_escaped(_conditions(dialect.reasoning.implicit_open_when))})"
            if dialect.reasoning.always:
                tags += "; always reasons"
            replay = f"{dialect.replay.mode}" + (
                f" → `{dialect.replay.field}`" if dialect.replay.mode != "strip" else ""
            )
            if dialect.replay.missing == "placeholder":
                replay += ", placeholder on a miss"
            if dialect.replay.params:
                replay += f", asks `{_escaped(_keep_text(dialect))}`"
            if dialect.replay.missing_signature == "skip_validator":
                replay += ", `skip_thought_signature_validator` where a signature is missing"
            entry = f"**{name}**" if name else ""
            out.append(f"| {entry} | {matches} | {tags} | {replay} | {docs} | {verified} |")
    return "\n".join(out)


def render_generated(table: ProvidersTable) -> str:
    return (
        "### Levels: what is sent\n\n"
        + render_levels_table(table)
        + "\n\n### Matching, reasoning and replay\n\n"
        + render_entries_table(table)
        + "\n"
    )


def update_generated_section(doc: str, table: ProvidersTable) -> str:
    """`doc` with the text between the generated-section marks replaced by the current tables."""
    start = doc.index(BEGIN_MARK) + len(BEGIN_MARK)
    end = doc.index(END_MARK, start)
    return doc[:start] + "\n" + render_generated(table) + doc[end:]


# The README's smaller table: one row per entry (the model overrides are docs/providers.md's).
README_BEGIN_MARK = "<!-- BEGIN GENERATED: python -m proxy.explain (levels by entry) -->"


def render_summary_table(table: ProvidersTable) -> str:
    """Markdown: every entry × level -> what is sent for a model no override names, and how many
    model overrides the entry has."""
    out = ["| entry | off | standard | deep | model overrides |", "|---|---|---|---|---|"]
    for summary in table.summaries():
        dialect = summary.dialect
        cells = [_cell(dialect.levels.get(level), dialect.not_applicable.get(level)) for level in Level]
        overrides = str(len(summary.overrides)) if summary.overrides else "—"
        out.append(f"| **{summary.name}** | {' | '.join(cells)} | {overrides} |")
    return "\n".join(out)


def update_readme_section(doc: str, table: ProvidersTable) -> str:
    """`doc` (the README) with its levels-by-entry table replaced by the current one."""
    start = doc.index(README_BEGIN_MARK) + len(README_BEGIN_MARK)
    end = doc.index(END_MARK, start)
    return doc[:start] + "\n" + render_summary_table(table) + "\n" + doc[end:]


def update_generated(doc: str, table: ProvidersTable) -> str:
    """Every generated section `doc` has (docs/providers.md's tables, the README's table)."""
    if README_BEGIN_MARK not in doc and BEGIN_MARK not in doc:
        raise ValueError("no generated section: add the BEGIN/END GENERATED marks")
    if README_BEGIN_MARK in doc:
        doc = update_readme_section(doc, table)
    if BEGIN_MARK in doc:
        doc = update_generated_section(doc, table)
    return doc


def main(argv: list[str] | None = None) -> int:
    """Regenerate the tables in docs/providers.md and the README (or the files given) from
    providers.yaml."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(__file__).resolve().parent.parent
    paths = [Path(a) for a in args] if args else [root / "docs" / "providers.md", root / "README.md"]
    table = ProvidersTable.load(default_providers_path())
    for doc_path in paths:
        doc = doc_path.read_text(encoding="utf-8")
        updated = update_generated(doc, table)
        if updated != doc:
            doc_path.write_text(updated, encoding="utf-8")
            print(f"updated {doc_path}")
        else:
            print(f"{doc_path} is up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
