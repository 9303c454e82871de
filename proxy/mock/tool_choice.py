"""Which tool the simulated model calls, and the shell command it runs (proxy.mock.scenarios uses it).

Pure. An agent pointed at the demo runs what the simulated model calls, so the model calls a tool
the agent can run harmlessly and stops after one: Claude Code, which offers `Agent` first, once
ran 1,672 requests in four minutes against `thinkproxy demo --keep` when the model called the first
tool it was offered. Now, among the tools offered (a forced `tool_choice` still wins):

1. a shell tool, alone (Claude Code's `Bash`, Codex's `exec_command`, `shell`, …: by name, with a
   `command` or `cmd` argument), run with `echo` (`echo_command`): never the user's words as a
   command, except an `echo` the user wrote themselves with at most a redirect to a plain file
   name (what the real-client tests ask: `echo codex-ran > proof.txt`);
2. else a read tool, alone (`Read`, `read_file`, `view`, …), on `README.md`;
3. else the other tools in the order offered, but never one that starts another agent (`Agent`,
   `Task`, …): offered only those, the model answers in text.

After a tool result it answers (proxy.mock.scenarios): one call per question, so a session ends.
"""

from __future__ import annotations

import re
import shlex
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
GREETING = "Hello from the simulated model."
ECHO_CHARS = 60
# An echo the user wrote: plain words, at most a redirect to a plain file name.
_PLAIN_ECHO = re.compile(r"echo [\w .,:!?-]*(?: >>? [\w.-]+)?")


def ranked(tools: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The tools the model may call, best first: the first shell tool alone, else the first read
    tool alone (an agent's harness: one harmless call), else the others as offered; agent tools
    never."""
    shells = [t for t in tools if is_shell(t)]
    reads = [t for t in tools if not is_shell(t) and _name(t) in READ_NAMES]
    if shells or reads:
        return [(shells or reads)[0]]
    return [t for t in tools if _name(t) not in AGENT_NAMES]


def is_shell(tool: Mapping[str, Any]) -> bool:
    return _name(tool) in SHELL_NAMES and command_key(tool) is not None


def command_key(tool: Mapping[str, Any]) -> str | None:
    """The argument a shell tool takes its command in (`command`, `cmd`), if it has one."""
    parameters = tool.get("parameters")
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    if not isinstance(properties, Mapping):
        return None
    return next((key for key in COMMAND_KEYS if key in properties), None)


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
    """A shell command that only prints: `echo` and the words, quoted; an echo the user wrote in
    plain words (a redirect to a plain file name at most) as written."""
    text = " ".join(words.split())
    if _PLAIN_ECHO.fullmatch(text):
        return text
    return "echo " + shlex.quote(_words(text))


def _words(text: str) -> str:
    flat = " ".join(text.split()) or GREETING
    return flat if len(flat) <= ECHO_CHARS else flat[: ECHO_CHARS - 1].rstrip() + "…"


def _name(tool: Mapping[str, Any]) -> str:
    name = tool.get("name")
    return name.lower() if isinstance(name, str) else ""
