"""Which tool calls a person must review, and what a reviewer may decide. Pure.

A policy is a list of case-sensitive globs on tool names (`send_email,delete_*`). A tool its
client knows by another name than the upstream's (the Responses door's namespaced tools: the
client runs `send_email` in namespace `mail`, a chat upstream calls `mail__send_email`) is matched
by each of its names, and shown to reviewers and clients as `namespace.name` (`ClientTool`). A
decision is
`approve`, `modify` (with the arguments the call goes out with instead) or `reject` (with an
optional comment); a review that nobody decides in time ends as `timeout`, and a call the proxy
could not put before a reviewer (the review store is down, the call came in a shape the gate
cannot attribute) as `refused`. The client sees each like a rejection, told who decided.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import orjson

from proxy.core.errors import BadRequest, Forbidden, quoted
from proxy.core.stream.summaries import summarize_arguments

MAX_COMMENT_CHARS = 500


class Verdict(StrEnum):
    APPROVE = "approve"
    MODIFY = "modify"
    REJECT = "reject"
    TIMEOUT = "timeout"  # never posted: what a review becomes when nobody decides in time
    REFUSED = "refused"  # never posted: the proxy refused the call without a review (comment: why)


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    arguments: str | None = None  # modify: the call's new arguments, one JSON object as text
    comment: str | None = None
    reviewer: str | None = None  # the reviewer key's name, for the audit line

    @property
    def releases_call(self) -> bool:
        return self.verdict in (Verdict.APPROVE, Verdict.MODIFY)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "arguments": self.arguments,
            "comment": self.comment,
            "reviewer": self.reviewer,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Decision:
        """A stored decision; fields a newer replica adds are ignored, a malformed one is a ValueError."""
        if not isinstance(data, dict):
            raise ValueError("a stored decision is not a JSON object")
        optional = [data.get(k) for k in ("arguments", "comment", "reviewer")]
        if not all(v is None or isinstance(v, str) for v in optional):
            raise ValueError("a stored decision has a field of the wrong type")
        return cls(Verdict(str(data.get("verdict"))), *optional)


TIMED_OUT = Decision(Verdict.TIMEOUT)


@dataclass(frozen=True, slots=True)
class HeldCall:
    """One tool call held back from the client: what a reviewer sees."""

    review_id: str
    index: int  # the call's position in the response's tool_calls
    call_id: str
    tool: str
    arguments: str  # exactly as the model produced them
    created: float = 0.0
    expires: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)  # model, provider: context for the reviewer

    @property
    def summary(self) -> str:
        return summarize_arguments(self.arguments)

    def listing(self) -> dict[str, Any]:
        """What `GET /thinkproxy/reviews` shows: a summary, never the full arguments."""
        return {
            "id": self.review_id,
            "tool": self.tool,
            "call_id": self.call_id,
            "summary": self.summary,
            "created": self.created,
            "expires": self.expires,
            **self.extra,
        }

    def detail(self) -> dict[str, Any]:
        return {**self.listing(), "arguments": self.arguments}

    def to_json(self) -> dict[str, Any]:
        return {
            "review_id": self.review_id,
            "index": self.index,
            "call_id": self.call_id,
            "tool": self.tool,
            "arguments": self.arguments,
            "created": self.created,
            "expires": self.expires,
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, data: Any) -> HeldCall:
        """A stored review. Fields this version does not know (a newer replica's, in a rolling
        upgrade) are ignored; a missing or mistyped field is a ValueError naming it."""
        if not isinstance(data, dict):
            raise ValueError("a stored review is not a JSON object")
        for name in ("review_id", "call_id", "tool", "arguments"):
            if not isinstance(data.get(name), str):
                raise ValueError(f"a stored review has no string {name!r}")
        numbers = {k: data.get(k, 0) for k in ("index", "created", "expires")}
        for name, value in numbers.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"a stored review has no number {name!r}")
        extra = data.get("extra", {})
        if not isinstance(extra, dict):
            raise ValueError("a stored review's 'extra' is not an object")
        return cls(
            review_id=data["review_id"],
            index=int(numbers["index"]),
            call_id=data["call_id"],
            tool=data["tool"],
            arguments=data["arguments"],
            created=float(numbers["created"]),
            expires=float(numbers["expires"]),
            extra=extra,
        )


@dataclass(frozen=True, slots=True)
class ClientTool:
    """A tool as its client knows it, where the upstream calls it by another name: `send_email` in
    namespace `mail`, which a chat upstream calls `mail__send_email` (the Responses door's
    flattening, proxy.core.protocols.responses.tools)."""

    name: str
    namespace: str | None = None

    @property
    def shown(self) -> str:
        """The name reviewers, the trace and the client's rejection text show: `namespace.name`."""
        return f"{self.namespace}.{self.name}" if self.namespace else self.name


# The upstream's tool name → the tool its client knows by other names (empty: each tool is known
# by the name the upstream calls, as on the chat and Messages doors).
ClientNames = Mapping[str, ClientTool]
NO_CLIENT_NAMES: ClientNames = MappingProxyType({})


def shown_name(tool: str, names: ClientNames) -> str:
    """The name of the upstream's `tool` as its client knows it (itself, unless `names` says)."""
    known = names.get(tool)
    return known.shown if known is not None else tool


@dataclass(frozen=True, slots=True)
class ReviewPolicy:
    patterns: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return bool(self.patterns)

    def matches(self, tool: str) -> bool:
        return any(fnmatch.fnmatchcase(tool, pattern) for pattern in self.patterns)

    def covers(self, tool: str, names: ClientNames = NO_CLIENT_NAMES) -> bool:
        """Whether a call of the upstream's `tool` is held: a pattern matches the name the upstream
        called or any the client runs it by (`send_email`, `mail.send_email`, `mail__send_email`)."""
        if self.matches(tool):
            return True
        known = names.get(tool)
        return known is not None and (self.matches(known.name) or self.matches(known.shown))


def client_extra(tool: str, names: ClientNames, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """A held call's context for the reviewer: `extra`, and the name the upstream called when the
    client knows the tool by another (`upstream_tool`)."""
    out: dict[str, Any] = dict(extra or {})
    if tool in names:
        out["upstream_tool"] = tool
    return out


def parse_decision(body: bytes, reviewer: str | None) -> Decision:
    """A reviewer's POST body as a Decision; a BadRequest naming the field otherwise."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"Decision body is not valid JSON: {exc}.", code="invalid_json") from None
    if not isinstance(data, dict):
        raise BadRequest('Decision body must be a JSON object such as {"decision": "approve"}.')
    raw = data.get("decision")
    posted = {Verdict.APPROVE.value, Verdict.MODIFY.value, Verdict.REJECT.value}
    if not isinstance(raw, str) or raw not in posted:
        raise BadRequest(
            f"decision must be one of approve, modify, reject (got {quoted(raw)}).", param="decision"
        )
    verdict = Verdict(raw)
    comment = data.get("comment")
    if comment is not None and not isinstance(comment, str):
        raise BadRequest("comment must be a string.", param="comment")
    if comment is not None:
        comment = _one_line(comment)[:MAX_COMMENT_CHARS]
    arguments = None
    if verdict is Verdict.MODIFY:
        given = data.get("arguments")
        if not isinstance(given, dict):
            raise BadRequest(
                "modify needs arguments: a JSON object with the arguments the call goes out with.",
                param="arguments",
            )
        try:
            arguments = orjson.dumps(given).decode()
        except orjson.JSONEncodeError as exc:
            raise BadRequest(f"arguments cannot be encoded: {exc}.", param="arguments") from None
    elif "arguments" in data:
        raise BadRequest(f"arguments go only with decision modify, not {raw}.", param="arguments")
    return Decision(verdict, arguments, comment, reviewer)


def rejection_text(calls: list[tuple[HeldCall, Decision]], zh: bool) -> str:
    """The assistant text a client gets in place of the calls it may not run. It says who decided:
    a reviewer's comment on its own would read like the model's own reason."""
    lines = []
    for call, decision in calls:
        tool = call.tool or ("（名称未知）" if zh else "(unnamed)")
        if decision.verdict is Verdict.REJECT:
            if zh:
                said = f"：{decision.comment}" if decision.comment else ""
                lines.append(f"工具调用 {tool} 被审核人拒绝{said}。")
            else:
                said = f": {decision.comment}" if decision.comment else ""
                lines.append(f"The call to {tool} was rejected by a reviewer{said}.")
            continue
        if decision.verdict is Verdict.TIMEOUT:
            why = "审核超时" if zh else "the review timed out"
        else:
            why = decision.comment or ("代理拒绝了它" if zh else "the proxy refused it")
        if zh:
            lines.append(f"工具调用 {tool} 未被执行：{why}。")
        else:
            lines.append(f"The call to {tool} was not made: {why}.")
    return "\n".join(lines)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def _one_line(text: str) -> str:
    return _CONTROL.sub(" ", text).strip()


# Paths other than POST /v1/chat/completions on which an upstream can answer with tool calls.
# The gate reviews only chat completions; while a review policy is set, a request that could
# make calls anywhere else is refused rather than forwarded unreviewed (it would reach the client
# in a shape nothing looked at).
_CALLING_PATHS = ("chat/completions", "completions", "responses", "messages")
_CALLING_KEYS = ("tools", "functions", "tool_choice", "function_call")
_CALLING_FIELDS = tuple(f'"{key}"'.encode() for key in _CALLING_KEYS)


def refuse_unreviewed_route(method: str, path: str, body: bytes) -> None:
    """Forbidden for a pass-through request that could make tool calls (a known calling path, in
    any spelling of its slashes and case, or a body that offers tools) while review is on."""
    if method not in ("POST", "PUT", "PATCH"):
        return
    route = "/".join(part for part in path.lower().split("/") if part)
    calling = any(route == f"v1/{name}" or route.endswith(f"/{name}") for name in _CALLING_PATHS)
    offers_tools = False
    if not calling and body:
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            offers_tools = any(
                parsed.get(key) for key in ("tools", "functions", "tool_choice", "function_call")
            )
        else:  # not JSON this proxy reads, but perhaps JSON the upstream reads: look for the names
            offers_tools = any(name in body for name in _CALLING_FIELDS)
    if calling or offers_tools:
        raise Forbidden(
            f"This proxy holds tool calls for human review (THINKPROXY_REVIEW_TOOLS) and reviews them "
            f"only on POST /v1/chat/completions; {method} {path[:200]} could return tool calls nobody "
            "reviewed, so it is refused. Send the request to /v1/chat/completions.",
            code="review_not_available",
        )
