"""Responses API tools → chat-completions tools, for a bridged (chat-only) upstream.

Pure: values in, values out. Part of the Responses front door's request side
(proxy.core.protocols.responses.request); docs/responses.md holds the table.

- `function` tools become chat function tools (`name`, `description`, `parameters`, `strict`).
- `namespace` tools are flattened: each function (or custom tool) inside becomes a chat function
  named `<namespace>__<name>` (`SEPARATOR`); the reverse map (`ToolName`) lets the encoder emit
  `function_call` / `custom_tool_call` items with `name` and `namespace` again.
- `custom` (freeform) tools become a function with one string argument `input`; the encoder unwraps
  it back into a `custom_tool_call`'s `input`. A grammar is described to the model, not enforced.
- Every other tool type is a hosted tool the upstream cannot run (`web_search`, `file_search`,
  `code_interpreter`, `image_generation`, `computer_use_preview`, `mcp`, `local_shell`, `shell`,
  `apply_patch`, `tool_search`, …): left out and listed (`omit`), or refused (`refuse`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from proxy.core.errors import BadRequest, quoted
from proxy.core.review.rules import ClientTool

# Between a namespace and a tool's name in the flattened chat function name: `crm__lookup`.
SEPARATOR = "__"

HostedTools = Literal["omit", "refuse"]
ToolKind = Literal["function", "custom"]

_CHOICE_MODES = ("auto", "none", "required")


@dataclass(frozen=True, slots=True)
class ToolName:
    """What a chat function name stands for in the Responses request: the encoder's reverse map."""

    kind: ToolKind  # "function" → a function_call item; "custom" → custom_tool_call (`input`)
    name: str  # the tool's own name, without its namespace
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class MappedTools:
    tools: tuple[dict[str, Any], ...]  # chat tools, in the request's order
    names: Mapping[str, ToolName]  # chat function name → what it stands for
    namespaces: Mapping[str, tuple[str, ...]]  # namespace → its chat function names
    omitted: tuple[str, ...]  # hosted tool types left out, first-seen order


@dataclass(frozen=True, slots=True)
class MappedChoice:
    choice: Any  # the chat tool_choice, or None for none sent
    allowed: frozenset[str] | None  # allowed_tools: only these chat functions stay
    dropped: str | None  # a note when a choice could not be carried


def flat_name(name: str, namespace: str | None) -> str:
    """The chat function name of a (possibly namespaced) Responses tool."""
    return f"{namespace}{SEPARATOR}{name}" if namespace else name


def client_names(names: Mapping[str, ToolName]) -> dict[str, ClientTool]:
    """The namespaced tools by their chat function name, as the client knows them: the review gate
    matches a call of `mail__send_email` by `send_email` and `mail.send_email` too, and shows it
    as `mail.send_email` (proxy.core.review.rules)."""
    return {chat: ClientTool(tool.name, tool.namespace) for chat, tool in names.items() if tool.namespace}


def map_tools(tools: Any, hosted: HostedTools) -> MappedTools:
    """Chat tools for the request's `tools` (absent or null: none)."""
    if tools is None:
        return MappedTools((), {}, {}, ())
    if not isinstance(tools, list):
        raise BadRequest("tools must be a list of tool objects.", param="tools")
    chat: list[dict[str, Any]] = []
    names: dict[str, ToolName] = {}
    namespaces: dict[str, tuple[str, ...]] = {}
    omitted: list[str] = []
    for i, tool in enumerate(tools):
        param = f"tools[{i}]"
        kind = _type_of(tool, param)
        if kind == "namespace":
            ns = _name_of(tool, param)
            inner = tool.get("tools")
            if not isinstance(inner, list):
                raise BadRequest(f"{param}.tools must be a list of function or custom tools.", param=param)
            flat: list[str] = []
            for j, sub in enumerate(inner):
                sub_param = f"{param}.tools[{j}]"
                sub_kind = _type_of(sub, sub_param)
                if sub_kind not in ("function", "custom"):
                    raise BadRequest(
                        f"{sub_param} has type {quoted(sub_kind)}; a namespace holds only function and "
                        "custom tools.",
                        param=sub_param,
                    )
                entry = _tool(sub, sub_kind, sub_param, ns, tool.get("description"))
                flat.append(_add(names, entry, sub_param))
                chat.append(entry[0])
            namespaces[ns] = tuple(flat)
        elif kind in ("function", "custom"):
            entry = _tool(tool, kind, param, None, None)
            _add(names, entry, param)
            chat.append(entry[0])
        elif kind not in omitted:
            omitted.append(kind)
    if omitted and hosted == "refuse":
        listed = ", ".join(omitted)
        raise BadRequest(
            f"tools include hosted tools this upstream cannot run ({listed}): it speaks chat completions "
            "only, and the proxy is set to refuse them (THINKPROXY_RESPONSES_HOSTED_TOOLS=refuse). Remove "
            f"them from tools, or use a model whose upstream serves /v1/responses natively.",
            code="unsupported_tool",
            param="tools",
        )
    return MappedTools(tuple(chat), names, namespaces, tuple(omitted))


def map_tool_choice(choice: Any, tools: MappedTools) -> MappedChoice:
    """The chat tool_choice for the request's `tool_choice` (docs/responses.md, "tool_choice")."""
    if choice is None:
        return MappedChoice(None, None, None)
    if isinstance(choice, str):
        if choice not in _CHOICE_MODES:
            raise BadRequest(
                f"tool_choice {quoted(choice)} is not one of auto, none, required, or a tool object.",
                param="tool_choice",
            )
        return MappedChoice(choice, None, None)
    if not isinstance(choice, dict) or not isinstance(choice.get("type"), str):
        raise BadRequest(
            "tool_choice must be auto, none, required, or an object with a type.", param="tool_choice"
        )
    kind = choice["type"]
    if kind in ("function", "custom"):
        name = _choice_name(choice, tools, kind, "tool_choice")
        return MappedChoice({"type": "function", "function": {"name": name}}, None, None)
    if kind == "allowed_tools":
        return _allowed(choice, tools)
    # A hosted tool (file_search, web_search_preview, computer_use_preview, image_generation, mcp,
    # shell, apply_patch, …): it is left out, so forcing it cannot be carried.
    return MappedChoice(None, None, f"tool_choice (forces hosted tool {quoted(kind)}, which is omitted)")


def _allowed(choice: dict[str, Any], tools: MappedTools) -> MappedChoice:
    mode = choice.get("mode")
    if mode not in ("auto", "required"):
        raise BadRequest("tool_choice.mode must be auto or required.", param="tool_choice.mode")
    listed = choice.get("tools")
    if not isinstance(listed, list):
        raise BadRequest("tool_choice.tools must be a list of tool objects.", param="tool_choice.tools")
    allowed: set[str] = set()
    for i, entry in enumerate(listed):
        param = f"tool_choice.tools[{i}]"
        kind = _type_of(entry, param)
        if kind in ("function", "custom"):
            allowed.add(_choice_name(entry, tools, kind, param))
        elif kind == "namespace":
            ns = _name_of(entry, param)
            if ns not in tools.namespaces:
                raise BadRequest(
                    f"{param} names namespace {quoted(ns)}, which is not among tools.", param=param
                )
            allowed.update(tools.namespaces[ns])
        # A hosted tool is omitted anyway: allowing it changes nothing the upstream sees.
    if not allowed and mode == "required":
        raise BadRequest(
            "tool_choice requires a call from allowed_tools, but none of them is a function or custom "
            "tool this upstream can run; allow at least one function tool or use mode auto.",
            param="tool_choice",
        )
    return MappedChoice(mode, frozenset(allowed), None)


def _choice_name(entry: dict[str, Any], tools: MappedTools, kind: str, param: str) -> str:
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise BadRequest(f"{param}.name must be a non-empty string.", param=f"{param}.name")
    known = tools.names.get(name)
    if known is None or known.kind != kind:
        raise BadRequest(
            f"{param} names {kind} tool {quoted(name)}, which is not among tools. Name a {kind} tool from "
            f"tools (a namespaced one as <namespace>{SEPARATOR}<name>).",
            param=param,
        )
    return name


def _type_of(tool: Any, param: str) -> str:
    if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
        raise BadRequest(f"{param} must be a tool object with a string type.", param=param)
    kind: str = tool["type"]
    return kind


def _name_of(tool: dict[str, Any], param: str) -> str:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise BadRequest(f"{param}.name must be a non-empty string.", param=f"{param}.name")
    return name


def _tool(
    tool: dict[str, Any], kind: str, param: str, namespace: str | None, ns_description: Any
) -> tuple[dict[str, Any], ToolName]:
    name = _name_of(tool, param)
    function: dict[str, Any] = {"name": flat_name(name, namespace)}
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise BadRequest(f"{param}.description must be a string.", param=f"{param}.description")
    texts = [t for t in (ns_description, description) if isinstance(t, str) and t]
    if kind == "function":
        parameters = tool.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise BadRequest(f"{param}.parameters must be a JSON schema object.", param=f"{param}.parameters")
        strict = tool.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise BadRequest(f"{param}.strict must be true or false.", param=f"{param}.strict")
        if texts:
            function["description"] = "\n\n".join(texts)
        if parameters is not None:
            function["parameters"] = parameters
        if strict is not None:
            function["strict"] = strict
        return {"type": "function", "function": function}, ToolName("function", name, namespace)
    texts.append(_format_note(tool.get("format"), param))
    if description := "\n\n".join(t for t in texts if t):
        function["description"] = description
    function["parameters"] = {
        "type": "object",
        "properties": {"input": {"type": "string", "description": "The tool's whole input, as free text."}},
        "required": ["input"],
        "additionalProperties": False,
    }
    return {"type": "function", "function": function}, ToolName("custom", name, namespace)


def _format_note(fmt: Any, param: str) -> str:
    """A custom tool's input format, told to the model (a chat upstream cannot enforce a grammar)."""
    if fmt is None:
        return ""
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "grammar"):
        raise BadRequest(f"{param}.format must be a text or grammar format.", param=f"{param}.format")
    if fmt["type"] == "text":
        return ""
    syntax, definition = fmt.get("syntax"), fmt.get("definition")
    if syntax not in ("lark", "regex") or not isinstance(definition, str):
        raise BadRequest(
            f"{param}.format needs syntax lark or regex and a string definition.", param=f"{param}.format"
        )
    return f"The input must match this {syntax} grammar:\n{definition}"


def _add(names: dict[str, ToolName], entry: tuple[dict[str, Any], ToolName], param: str) -> str:
    chat_name: str = entry[0]["function"]["name"]
    if chat_name in names:
        raise BadRequest(
            f"{param} becomes chat function {quoted(chat_name)}, a name another tool already has (namespaced "
            f"tools are named <namespace>{SEPARATOR}<name> on this upstream). Rename one of them.",
            param=param,
        )
    names[chat_name] = entry[1]
    return chat_name
