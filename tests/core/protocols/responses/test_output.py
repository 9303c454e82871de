"""The `Response` object and the usage, as values (proxy.core.protocols.responses.output): every
field Open Responses' `ResponseResource` requires, echoing the request or the documented default,
`completed_at` from the caller's clock, cached input tokens in each upstream's shape."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.protocols.responses.output import (
    ResponseFrame,
    message_item,
    response_object,
    responses_usage,
)
from tests.helpers import OpenResponsesSchema

SCHEMA = OpenResponsesSchema()
REQUIRED = SCHEMA.document["components"]["schemas"]["ResponseResource"]["required"]


def frame(request: dict[str, Any], **options: Any) -> ResponseFrame:
    return ResponseFrame.for_request(
        request, response_id="resp_1", model="deepseek-v4-pro", created_at=1.7e9, **options
    )


def test_a_request_that_sets_nothing_gets_every_required_field() -> None:
    response = response_object(frame({"input": "hi"}), status="in_progress", output=[])
    assert set(REQUIRED) <= set(response)
    assert SCHEMA.errors(response, "ResponseResource") == []
    assert response["created_at"] == 1_700_000_000 and isinstance(response["created_at"], int)
    assert (response["temperature"], response["top_p"]) == (1.0, 1.0)
    assert (response["presence_penalty"], response["frequency_penalty"], response["top_logprobs"]) == (
        0.0,
        0.0,
        0,
    )
    assert response["text"] == {"format": {"type": "text"}} and response["metadata"] == {}
    assert (response["truncation"], response["store"], response["background"], response["service_tier"]) == (
        "disabled",
        True,
        False,
        "default",
    )
    for key in ("instructions", "previous_response_id", "reasoning", "max_output_tokens", "max_tool_calls"):
        assert response[key] is None, key


def test_completed_at_is_the_callers_clock_when_the_response_completes() -> None:
    ticks = iter([1_700_000_042.9])
    made = frame({"input": "hi"}, clock=lambda: next(ticks))
    assert response_object(made, status="in_progress", output=[])["completed_at"] is None
    assert response_object(made, status="failed", output=[])["completed_at"] is None
    done = response_object(made, status="completed", output=[message_item("msg_1", "Hi", status="completed")])
    assert done["completed_at"] == 1_700_000_042
    assert SCHEMA.errors(done, "ResponseResource") == []
    assert response_object(frame({"input": "hi"}), status="completed", output=[])["completed_at"] is None


def test_what_the_request_set_is_repeated() -> None:
    request = {
        "input": "hi",
        "instructions": "Be brief.",
        "temperature": 0.2,
        "top_p": None,  # (null counts as absent)
        "metadata": {"k": "v"},
        "text": {"verbosity": "low"},
        "reasoning": {"effort": "high", "generate_summary": "concise"},
        "background": True,
        "service_tier": "priority",
    }
    response = response_object(frame(request), status="in_progress", output=[])
    assert SCHEMA.errors(response, "ResponseResource") == []
    assert (response["instructions"], response["temperature"], response["top_p"]) == ("Be brief.", 0.2, 1.0)
    assert response["metadata"] == {"k": "v"}
    assert response["text"] == {"verbosity": "low", "format": {"type": "text"}}
    assert response["reasoning"] == {"effort": "high", "summary": "concise"}
    # What the bridge did, whatever was asked: answered in the request, no service tiers.
    assert (response["background"], response["service_tier"]) == (False, "default")


def test_tools_are_listed_as_the_model_had_them() -> None:
    declared = [
        {"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "defer_loading": True},
        {"type": "web_search"},
        {"type": "custom", "name": "apply_patch", "description": "Edit files."},
        {
            "type": "namespace",
            "name": "crm",
            "description": "CRM.",
            "tools": [{"type": "function", "name": "lookup"}],
        },
    ]
    response = response_object(frame({"input": "hi", "tools": declared}), status="in_progress", output=[])
    assert response["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": None,
            "parameters": {"type": "object"},
            "strict": None,
        },
        declared[2],
        declared[3],
    ]


def test_store_says_false_when_nothing_can_be_stored() -> None:
    assert (
        response_object(frame({"input": "hi"}, can_store=False), status="in_progress", output=[])["store"]
        is False
    )
    assert response_object(frame({"store": False}), status="in_progress", output=[])["store"] is False


@pytest.mark.parametrize(
    ("usage", "cached"),
    [
        (
            {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 6}},
            6,
        ),  # OpenAI
        (  # DeepSeek: both shapes, the first above zero counts
            {
                "prompt_tokens": 10,
                "completion_tokens": 2,
                "prompt_tokens_details": {"cached_tokens": 0},
                "prompt_cache_hit_tokens": 7,
                "prompt_cache_miss_tokens": 3,
            },
            7,
        ),
        ({"prompt_tokens": 10, "completion_tokens": 2, "cached_tokens": 8}, 8),  # Kimi (Moonshot)
        ({"prompt_tokens": 10, "completion_tokens": 2}, 0),  # nothing said
    ],
    ids=["openai", "deepseek", "kimi", "none"],
)
def test_cached_input_tokens_in_each_upstreams_shape(usage: dict[str, Any], cached: int) -> None:
    mapped = responses_usage(usage)
    assert mapped is not None and mapped["input_tokens_details"]["cached_tokens"] == cached
    assert SCHEMA.errors(mapped, "Usage") == []
