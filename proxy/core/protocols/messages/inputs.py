"""Anthropic Messages `system` and `messages` → chat-completions messages, for a bridged (chat-only)
upstream. Part of the Messages front door's request side (proxy.core.protocols.messages.request);
docs/messages.md holds the table.

Pure: values in, values out. Order is kept block by block:

- `text` blocks of one message are joined into one string (what every chat upstream takes); with an
  `image` or `document` beside them the message keeps a list of parts.
- `image` (`base64` or `url` source) → an `image_url` part; a `document` with a `text` source → a
  text part, a base64 PDF → a `file` part (OpenAI's shape); other document sources are refused.
- assistant `tool_use` blocks → `tool_calls` (arguments: the input as JSON).
- calls and results are paired by the rule both bridged doors keep (proxy.core.protocols.tool_pairing):
  a result answers a call not yet answered, every call is answered in the user message right after it.
- user `tool_result` blocks → one `tool` message each, in order; text in a result is its content,
  images in a result move to one user message after the results (chat tool messages carry text);
  a `tool_reference` block (a client-side tool search's answer) reads "Tool loaded: NAME" and
  loads that deferred tool (`MappedMessages.loaded_tools`, proxy.core.protocols.messages.request).
- `thinking` blocks are not put in the body: they are returned as `ThinkingTurn`s, attached to the
  assistant message they are in, with their signature untouched, for the edge to verify and put
  back in the provider's field. `redacted_thinking` (Anthropic's own encrypted reasoning) means
  nothing to a chat upstream: dropped and counted.
- server tool blocks (`server_tool_use`, `web_search_tool_result`, …) are refused naming the block.
- a `role: system` message after the first (Anthropic's mid-conversation system messages, which
  Claude Code sends) → a chat `system` message at the same place; text blocks only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from proxy.core import jsonio
from proxy.core.errors import BadRequest, quoted
from proxy.core.protocols.tool_pairing import MESSAGES, ToolPairing

PART_SEPARATOR: Final = "\n\n"
_IMAGE_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


@dataclass(frozen=True, slots=True)
class ThinkingBlock:
    """One `thinking` block as the client sent it: nothing is verified here. `next_call_id`: the id
    of the `tool_use` block right after it in the same message (what its blob is bound to), None
    when text or nothing follows."""

    thinking: str
    signature: str | None
    next_call_id: str | None


@dataclass(frozen=True, slots=True)
class ThinkingTurn:
    """Thinking to restore on one assistant message of the chat body."""

    message_index: int  # into body["messages"]
    tool_call_ids: tuple[str, ...]
    blocks: tuple[ThinkingBlock, ...]


@dataclass(frozen=True, slots=True)
class MappedMessages:
    messages: list[dict[str, Any]]
    thinking: tuple[ThinkingTurn, ...]
    redacted: int  # redacted_thinking blocks dropped
    loaded_tools: frozenset[str] = frozenset()  # deferred tools a tool_reference block loaded


@dataclass(slots=True)
class _Walk:
    messages: list[dict[str, Any]] = field(default_factory=list)
    thinking: list[ThinkingTurn] = field(default_factory=list)
    redacted: int = 0
    loaded: set[str] = field(default_factory=set)
    pairing: ToolPairing = field(default_factory=lambda: ToolPairing(MESSAGES))


def map_messages(system: Any, messages: Any) -> MappedMessages:
    walk = _Walk()
    if system is not None:
        walk.messages.append({"role": "system", "content": _system(system)})
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list of messages.", param="messages")
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(message, dict):
            raise BadRequest(f"{param} must be an object with role and content.", param=param)
        role, content = message.get("role"), message.get("content")
        if role == "user":
            _user(walk, content, param)
            walk.pairing.settle(f" in {param}")  # (the calls before it are answered here, or never)
        elif role == "assistant":
            walk.pairing.settle(f" before {param}")
            _assistant(walk, content, param)
        elif role == "system" and i > 0:
            walk.pairing.settle(f" before {param}")
            walk.messages.append({"role": "system", "content": _system_message(content, param)})
        else:
            raise BadRequest(
                f"{param}.role must be user or assistant (or system after the first message; "
                f"a first system prompt goes in the top-level system), got {quoted(role)}.",
                param=f"{param}.role",
            )
    walk.pairing.settle()
    return MappedMessages(walk.messages, tuple(walk.thinking), walk.redacted, frozenset(walk.loaded))


def _system(system: Any) -> str:
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return PART_SEPARATOR.join(_text(block, f"system[{j}]") for j, block in enumerate(system))
    raise BadRequest("system must be a string or a list of text blocks.", param="system")


def _system_message(content: Any, param: str) -> str:
    """A mid-conversation `role: system` message: a string or text blocks (cache_control ignored)."""
    blocks = _blocks(content, param)
    return PART_SEPARATOR.join(_text(block, f"{param}.content[{j}]") for j, block in enumerate(blocks))


def _blocks(content: Any, param: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise BadRequest(f"{param}.content must be a string or a list of content blocks.", param=param)
    for j, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise BadRequest(f"{param}.content[{j}] must be a content block with a type.", param=param)
    return content


def _user(walk: _Walk, content: Any, param: str) -> None:
    parts: list[dict[str, Any]] = []
    media: list[dict[str, Any]] = []  # from tool results: after them, in one user message
    for j, block in enumerate(_blocks(content, param)):
        at = f"{param}.content[{j}]"
        kind = block["type"]
        if kind == "tool_result":
            if parts:  # (text before a result: kept before it, in order)
                walk.messages.append(_message("user", parts))
                parts = []
            result = _tool_result(block, at, media, walk.loaded)
            walk.pairing.answer(result["tool_call_id"], at)
            walk.messages.append(result)
        elif kind == "text":
            parts.append({"type": "text", "text": _text(block, at)})
        elif kind == "image":
            parts.append(_image(block, at))
        elif kind == "document":
            parts.append(_document(block, at))
        elif kind in ("thinking", "redacted_thinking", "tool_use"):
            raise BadRequest(f"{at}: {kind} blocks belong to assistant messages.", param=at)
        else:
            raise _unsupported(kind, at)
    if media:
        walk.messages.append(_message("user", media))
    if parts:
        walk.messages.append(_message("user", parts))


def _assistant(walk: _Walk, content: Any, param: str) -> None:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    thinking: list[ThinkingBlock] = []
    blocks = _blocks(content, param)
    for j, block in enumerate(blocks):
        at = f"{param}.content[{j}]"
        kind = block["type"]
        if kind == "text":
            texts.append(_text(block, at))
        elif kind == "tool_use":
            calls.append(_tool_use(block, at))
            walk.pairing.call(calls[-1]["id"], at)
        elif kind == "thinking":
            text, signature = block.get("thinking"), block.get("signature")
            if not isinstance(text, str):
                raise BadRequest(f"{at}.thinking must be a string.", param=f"{at}.thinking")
            after = blocks[j + 1] if j + 1 < len(blocks) else None
            next_id = after.get("id") if after is not None and after.get("type") == "tool_use" else None
            thinking.append(
                ThinkingBlock(
                    text,
                    signature if isinstance(signature, str) and signature else None,
                    next_id if isinstance(next_id, str) else None,
                )
            )
        elif kind == "redacted_thinking":
            walk.redacted += 1
        elif kind in ("image", "document", "tool_result"):
            raise BadRequest(f"{at}: {kind} blocks belong to user messages.", param=at)
        else:
            raise _unsupported(kind, at)
    if not texts and not calls and not thinking:
        return  # (only redacted thinking: nothing a chat upstream can read)
    # (content null only beside tool calls: chat upstreams refuse an assistant message with neither)
    text = PART_SEPARATOR.join(texts) if texts else (None if calls else "")
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    if thinking:
        ids = tuple(call["id"] for call in calls)
        walk.thinking.append(ThinkingTurn(len(walk.messages), ids, tuple(thinking)))
    walk.messages.append(message)


def _message(role: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    if all(p["type"] == "text" for p in parts):
        return {"role": role, "content": PART_SEPARATOR.join(p["text"] for p in parts)}
    return {"role": role, "content": parts}


def _text(block: Any, at: str) -> str:
    if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
        raise BadRequest(f"{at} must be a text block with a string text.", param=at)
    return str(block["text"])


def _tool_use(block: dict[str, Any], at: str) -> dict[str, Any]:
    call_id, name, input_ = block.get("id"), block.get("name"), block.get("input", {})
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        raise BadRequest(f"{at} must be a tool_use block with an id and a name.", param=at)
    arguments = jsonio.dumps(input_).decode()
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _tool_result(
    block: dict[str, Any], at: str, media: list[dict[str, Any]], loaded: set[str]
) -> dict[str, Any]:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise BadRequest(f"{at}.tool_use_id must be a non-empty string.", param=f"{at}.tool_use_id")
    content = block.get("content", "")
    texts: list[str] = []
    found: list[dict[str, Any]] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for k, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            where = f"{at}.content[{k}]"
            if kind == "text":
                texts.append(_text(part, where))
            elif kind == "image":
                found.append(_image(part, where))
            elif kind == "document":
                found.append(_document(part, where))
            elif kind == "tool_reference" and isinstance(part.get("tool_name"), str) and part["tool_name"]:
                loaded.add(part["tool_name"])
                texts.append(f"Tool loaded: {part['tool_name']}")
            else:
                raise BadRequest(
                    f"{where}: a tool result holds text, image, document or tool_reference blocks.",
                    param=where,
                )
    else:
        raise BadRequest(f"{at}.content must be a string or a list of blocks.", param=f"{at}.content")
    if found:
        texts.append(f"(the {len(found)} attachment(s) of this result follow in the next user message)")
        media.append({"type": "text", "text": f"Attachments from the result of tool call {call_id}:"})
        media.extend(found)
    text = PART_SEPARATOR.join(t for t in texts if t)
    if block.get("is_error") is True:
        # Chat has no error flag on a tool message: the model reads it in the text instead.
        text = f"Error: {text}" if text else "Error"
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _image(block: dict[str, Any], at: str) -> dict[str, Any]:
    source = block.get("source")
    kind = source.get("type") if isinstance(source, Mapping) else None
    if kind == "base64" and isinstance(source, Mapping):
        media_type, data = source.get("media_type"), source.get("data")
        if media_type not in _IMAGE_TYPES or not isinstance(data, str) or not data:
            raise BadRequest(
                f"{at}.source needs media_type (one of {', '.join(sorted(_IMAGE_TYPES))}) and data.",
                param=f"{at}.source",
            )
        return {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{data}"}}
    if kind == "url" and isinstance(source, Mapping) and isinstance(source.get("url"), str):
        return {"type": "image_url", "image_url": {"url": source["url"]}}
    raise BadRequest(
        f"{at}.source must be base64 or url; a file source cannot be looked up on this upstream.",
        param=f"{at}.source",
    )


def _document(block: dict[str, Any], at: str) -> dict[str, Any]:
    source = block.get("source")
    kind = source.get("type") if isinstance(source, Mapping) else None
    title = block.get("title")
    if kind == "text" and isinstance(source, Mapping) and isinstance(source.get("data"), str):
        text = source["data"]
        return {"type": "text", "text": f"{title}\n\n{text}" if isinstance(title, str) and title else text}
    if (
        kind == "base64"
        and isinstance(source, Mapping)
        and source.get("media_type") == "application/pdf"
        and isinstance(source.get("data"), str)
    ):
        file: dict[str, Any] = {"file_data": f"data:application/pdf;base64,{source['data']}"}
        if isinstance(title, str) and title:
            file["filename"] = title
        return {"type": "file", "file": file}
    raise BadRequest(
        f"{at}: a document reaches a chat upstream as plain text (a text source) or a base64 PDF; "
        f"a {quoted(kind)} source cannot be sent there.",
        param=f"{at}.source",
    )


def _unsupported(kind: str, at: str) -> BadRequest:
    return BadRequest(
        f"{at} has type {quoted(kind)}, which a chat upstream cannot take (server tools and their results "
        "run on Anthropic's servers only); expected text, image, document, tool_use, tool_result, "
        "thinking or redacted_thinking.",
        param=at,
    )
