"""Which tool the simulated model calls, and the shell command it runs (proxy.mock.scenarios uses it).

Pure. An agent pointed at the demo runs what the simulated model calls, so the model calls a tool
the agent can run harmlessly and stops after one: Claude Code, which offers `Agent` first, once
ran 1,672 requests in four minutes against `thinkproxy demo --keep` when the model called the first
tool it was offered. Now, among the tools offered (a forced `tool_choice` still wins):

1. a shell tool, alone: one known by name (Claude Code's `Bash`, Codex's `exec_command`,
   `shell`, …) first, else any tool with a free-text `command` or `cmd` argument (OpenHands'
   `execute_bash`, Goose's `developer__shell`), run with `echo` (`echo_command`): never the user's
   words as a command. The echoed words are cut down to ASCII letters, digits, spaces and `.,:-`
   and single-quoted, which only prints in sh, bash, fish, PowerShell and cmd alike (PowerShell
   reads the curly quotes `‘’` as quotes too: a shell-quoted `x’;calc;’` would run calc). An
   `echo` the user wrote themselves in such words, with at most a redirect to a plain `.txt`
   file name, is run as written (what the real-client tests ask: `echo codex-ran > proof.txt`);
2. else a read tool, alone (`Read`, `read_file`, `view`, …), on `README.md`;
3. else the other tools in the order offered, but never one that starts another agent (`Agent`,
   `Task`, …) or changes files (a name with write, edit, create, delete, move, patch, …: its
   arguments would be made up, and a `write_file` would overwrite a real file with the user's
   words) unless the user's message names it: offered only those, the model answers in text.

After a tool result it answers (proxy.mock.scenarios): one call per question, so a session ends.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

SHELL_NAMES = frozenset(
    (
        "bash",
        "shell",
        "exec_command",
        "shell_command",
        "local_shell",
        "run_command",
        "execute_command",
        "run_shell_command",
        "run_terminal_cmd",
        "terminal",
    )
)
COMMAND_KEYS = ("command", "cmd")
READ_NAMES = frozenset(("read", "read_file", "readfile", "view", "view_file", "open_file", "cat"))
AGENT_NAMES = frozenset(("agent", "task", "dispatch_agent", "spawn_agent", "subagent", "delegate"))
# The words of a tool name that says it changes files (`write_file`, `str_replace_based_edit`,
# `createDirectory`, `apply_patch`, `delete`, …): an agent's own file tools, whose made-up arguments
# would land on the user's files. (Other actions, `send_email` say, stay callable: they are what the
# review gate's demos hold for a person to decide.)
CHANGING_WORDS = frozenset(
    (
        *("write", "edit", "create", "delete", "remove", "rm", "rmdir", "mkdir", "move", "mv", "rename"),
        *("patch", "apply", "replace", "save", "insert", "append", "truncate", "overwrite"),
    )
)
GREETING = "Hello from the simulated model."
ECHO_CHARS = 60
# An echo the user wrote: plain words (no globs, no quotes), at most a redirect to a plain `.txt`
# file name (never a dot file, `..` or another file kind).
_PLAIN_ECHO = re.compile(r"echo [A-Za-z0-9 .,:-]*(?: >>? [A-Za-z0-9_][A-Za-z0-9_-]*\.txt)?")
# What an echoed word keeps: what no shell (sh, fish, PowerShell, cmd) reads as more than text.
_UNSAFE = re.compile(r"[^A-Za-z0-9 .,:-]+")


def ranked(tools: Sequence[Mapping[str, Any]], asked: str = "") -> list[Mapping[str, Any]]:
    """The tools the model may call, best first: the first shell tool alone (one known by name
    before one only known by its `command` argument), else the first read tool alone (an agent's
    harness: one harmless call), else the others as offered; agent tools never, and a tool that
    changes files only when the user's message (`asked`) names it."""
    shells = sorted((t for t in tools if is_shell(t)), key=lambda t: _name(t) not in SHELL_NAMES)
    reads = [t for t in tools if not is_shell(t) and _name(t) in READ_NAMES]
    if shells or reads:
        return [(shells or reads)[0]]
    named = set(re.findall(r"[a-z0-9_-]+", asked.lower()))
    return [t for t in tools if _name(t) not in AGENT_NAMES and (not changes_things(t) or _name(t) in named)]


def changes_things(tool: Mapping[str, Any]) -> bool:
    """Whether a tool's name says it changes files (CHANGING_WORDS, in snake, kebab or camel case)."""
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(tool.get("name") or "")).lower()
    return bool(set(re.split(r"[^a-z0-9]+", words)) & CHANGING_WORDS)


def is_shell(tool: Mapping[str, Any]) -> bool:
    """Whether a tool runs a command: it takes a free-text (or argv) `command` or `cmd`, whatever
    its name (an unknown shell filled with the user's words would run them)."""
    return command_key(tool) is not None


def command_key(tool: Mapping[str, Any]) -> str | None:
    """The argument a shell tool takes its command in (`command`, `cmd`), if it has one: a string
    or an array, not a choice (an editor's `command` enum of `view`, `create`, … is no shell)."""
    parameters = tool.get("parameters")
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    if not isinstance(properties, Mapping):
        return None
    return next((key for key in COMMAND_KEYS if _free_command(properties.get(key))), None)


def _free_command(schema: Any) -> bool:
    if not isinstance(schema, Mapping) or "enum" in schema or "const" in schema:
        return False
    kind = schema.get("type", "string")
    kinds = kind if isinstance(kind, list) else [kind]
    return "string" in kinds or "array" in kinds


def with_echo(tool: Mapping[str, Any], arguments: dict[str, Any], words: str) -> dict[str, Any]:
    """A shell tool's arguments with its command an `echo` of `words` (an argv as `["echo",
    words]`); any other tool's as they are."""
    key = command_key(tool) if is_shell(tool) else None
    if key is None:
        return arguments
    if isinstance(arguments.get(key), list):
        return {**arguments, key: ["echo", _words(words)]}
    return {**arguments, key: echo_command(words)}


def echo_command(words: str) -> str:
    """A shell command that only prints, in any shell: `echo` and the words cut down to
    `[A-Za-z0-9 .,:-]`, single-quoted; an echo the user wrote in such words (a redirect to a
    plain `.txt` file name at most) as written."""
    text = " ".join(words.split())
    if _PLAIN_ECHO.fullmatch(text):
        return text
    return "echo '" + _words(text) + "'"


def _words(text: str) -> str:
    """The words an echo prints: only `[A-Za-z0-9 .,:-]` kept (no quote, no `$`, `%`, `;`, glob
    or non-ASCII character left to any shell), spaces collapsed, at most ECHO_CHARS long; the
    greeting when nothing is left."""
    flat = " ".join(_UNSAFE.sub("", " ".join(text.split())).split())
    if len(flat) > ECHO_CHARS:
        flat = flat[:ECHO_CHARS].rstrip()
    return flat or GREETING


def _name(tool: Mapping[str, Any]) -> str:
    name = tool.get("name")
    return name.lower() if isinstance(name, str) else ""
