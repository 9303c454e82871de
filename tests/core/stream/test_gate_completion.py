"""The review gate for non-stream responses (proxy.core.stream.gate_completion): what it holds of a
whole completion, and what each decision makes of it. Shapes it removes: test_gate_shapes.py."""

from __future__ import annotations

import itertools
from typing import Any

from proxy.core.review.rules import ClientTool, Decision, ReviewPolicy, Verdict
from proxy.core.stream.gate_completion import completion_finish, completion_held_calls, release_completion

POLICY = ReviewPolicy(("send_email", "delete_*"))


def ids() -> Any:
    counter = itertools.count(1)
    return lambda: f"rv_{next(counter)}"


def completion(*calls: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "id": "x",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                        for i, n, a in calls
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "trace": [{"type": "done", "seq": 0, "t_ms": 5, "finish_reason": "tool_calls"}],
    }


def test_completion_reject_and_modify() -> None:
    body = completion(("a", "send_email", '{"to":"1"}'), ("b", "kb_search", "{}"), ("c", "delete_x", "{}"))
    held = completion_held_calls(body, POLICY, new_id=ids(), now=0.0, timeout=1.0)
    assert [c.tool for c in held] == ["send_email", "delete_x"]
    out = release_completion(
        body,
        held,
        {
            held[0].review_id: Decision(Verdict.MODIFY, arguments='{"to":"2"}'),
            held[1].review_id: Decision(Verdict.REJECT),
        },
        zh=False,
    )
    message = out["choices"][0]["message"]
    assert [(c["id"], c["function"]["arguments"]) for c in message["tool_calls"]] == [
        ("a", '{"to":"2"}'),
        ("b", "{}"),
    ]
    assert message["content"] == "The call to delete_x was rejected by a reviewer."
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    # `done` stays last: the exchange ends when the decisions are in (t_ms includes the hold).
    assert [e["type"] for e in out["trace"]] == [
        "review.request",
        "review.request",
        "review.decision",
        "review.decision",
        "done",
    ]
    assert (
        body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == '{"to":"1"}'
    )  # not mutated


def test_completion_all_rejected_ends_with_stop() -> None:
    body = completion(("a", "send_email", "{}"))
    held = completion_held_calls(body, POLICY, new_id=ids(), now=0.0, timeout=1.0)
    out = release_completion(body, held, {}, zh=True)  # nobody decided: timeout
    choice = out["choices"][0]
    assert "tool_calls" not in choice["message"] and choice["finish_reason"] == "stop"
    assert choice["message"]["content"] == "工具调用 send_email 未被执行：审核超时。"


def test_the_finish_reason_for_the_trace_is_the_one_the_client_gets() -> None:
    unreadable = {"id": "u", "type": "function", "function": {"name": "kb_search", "arguments": ["x"]}}
    cases = [
        completion(("a", "send_email", "{}"), ("b", "kb_search", "{}")),
        completion(("a", "send_email", "{}")),
        completion(("b", "kb_search", "{}")),
    ]
    with_unreadable = completion(("a", "send_email", "{}"))
    with_unreadable["choices"][0]["message"]["tool_calls"].insert(0, unreadable)
    cases.append(with_unreadable)
    for body in cases:
        held = completion_held_calls(body, POLICY, new_id=ids(), now=0.0, timeout=1.0)
        for verdict in (Verdict.APPROVE, Verdict.REJECT):
            decisions = {c.review_id: Decision(verdict) for c in held}
            out = release_completion(body, held, decisions, zh=False)
            assert completion_finish(body, held, decisions) == out["choices"][0]["finish_reason"]


def test_a_namespaced_call_is_held_by_the_name_its_client_runs() -> None:
    """A Responses client's `send_email` in namespace `mail` comes back from a chat upstream as
    `mail__send_email`: a `send_email` policy holds it, and the reviewer sees `mail.send_email`."""
    body = completion(("a", "mail__send_email", "{}"), ("b", "crm__lookup", "{}"))
    names = {"mail__send_email": ClientTool("send_email", "mail"), "crm__lookup": ClientTool("lookup", "crm")}
    held = completion_held_calls(body, POLICY, new_id=ids(), now=0.0, timeout=1.0, names=names)
    assert [(c.tool, c.index, c.extra) for c in held] == [
        ("mail.send_email", 0, {"upstream_tool": "mail__send_email"})
    ]
    out = release_completion(body, held, {}, zh=False)
    assert (
        out["choices"][0]["message"]["content"]
        == "The call to mail.send_email was not made: the review timed out."
    )


def test_a_call_removed_for_its_shape_is_named_as_its_client_knows_it() -> None:
    """The client is told about a removed call by the name it runs the tool by (`mail.send_email`),
    as the stream gate tells it, never by the upstream's flattened `mail__send_email`."""
    names = {"mail__send_email": ClientTool("send_email", "mail")}
    body = completion(("a", "crm_lookup", "{}"))
    body["choices"][0]["message"]["tool_calls"].append(
        {"id": "b", "type": "custom", "custom": {"name": "mail__send_email", "input": "x"}}
    )
    body["choices"].append(
        {
            "index": 1,
            "message": {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c",
                        "type": "function",
                        "function": {"name": "mail__send_email", "arguments": "{}"},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    )
    held = completion_held_calls(body, POLICY, new_id=ids(), now=0.0, timeout=1.0, names=names)
    out = release_completion(body, held, {}, zh=False, names=names)
    content = out["choices"][0]["message"]["content"]
    assert "mail__send_email" not in content
    assert content.count("mail.send_email") == 2, content
