"""The simulated model reads the user's words, not the context an agent harness adds to the turn."""

from __future__ import annotations

import orjson

from proxy.mock.scenarios import Depth, answer

BASH = {
    "type": "function",
    "function": {
        "name": "Bash",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
            "required": ["command", "description"],
        },
    },
}


def test_claude_codes_system_reminders_are_not_the_users_words() -> None:
    """Claude Code puts `<system-reminder>` blocks before the prompt in the same user turn (the
    Messages door joins text blocks into one string): the tool's arguments are the prompt alone."""
    reminder = "<system-reminder>\nAttribution for git commits:\n- Co-Authored-By: x\n</system-reminder>\n"
    request = {
        "messages": [{"role": "user", "content": f"{reminder}\n\necho ran > proof.txt"}],
        "tools": [BASH],
    }
    (call,) = answer(request, Depth.STANDARD).tool_calls
    assert orjson.loads(call.arguments) == {
        "command": "echo ran > proof.txt",
        "description": "echo ran > proof.txt",
    }
