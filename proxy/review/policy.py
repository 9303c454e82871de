"""Which tool calls a person must review, and what a reviewer may decide. Pure.

A policy is a list of case-sensitive globs on tool names (`send_email,delete_*`). A decision is
`approve`, `modify` (with the arguments the call goes out with instead) or `reject` (with an
optional comment); a review that nobody decides in time ends as `timeout`, which the client sees
exactly like a rejection.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson

from proxy.errors import BadRequest
from proxy.summaries import summarize_arguments

MAX_COMMENT_CHARS = 500


class Verdict(StrEnum):
    APPROVE = "approve"
    MODIFY = "modify"
    REJECT = "reject"
    TIMEOUT = "timeout"  # never posted: what a review becomes when nobody decides in time


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
        return cls(Verdict(data["verdict"]), data.get("arguments"), data.get("comment"), data.get("reviewer"))


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
    def from_json(cls, data: dict[str, Any]) -> HeldCall:
        return cls(**data)


@dataclass(frozen=True, slots=True)
class ReviewPolicy:
    patterns: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return bool(self.patterns)

    def matches(self, tool: str) -> bool:
        return any(fnmatch.fnmatchcase(tool, pattern) for pattern in self.patterns)


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
        raise BadRequest(f"decision must be one of approve, modify, reject (got {raw!r}).", param="decision")
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
    """The assistant text a client gets in place of the calls it may not run."""
    lines = []
    for call, decision in calls:
        if decision.verdict is Verdict.TIMEOUT:
            why = "审核超时" if zh else "the review timed out"
        else:
            why = decision.comment or ("审核人拒绝" if zh else "rejected by a reviewer")
        if zh:
            lines.append(f"工具调用 {call.tool} 未被执行：{why}。")
        else:
            lines.append(f"The call to {call.tool} was not made: {why}.")
    return "\n".join(lines)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def _one_line(text: str) -> str:
    return _CONTROL.sub(" ", text).strip()
