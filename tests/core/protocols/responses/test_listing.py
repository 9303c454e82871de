"""The input-items list as values (proxy.core.protocols.responses.listing): the query checked,
stored items in the listed shape (openai-python's `ResponseItem`, Open Responses' `ItemField`),
pages cut by cursor in either order."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from openai.types.responses import ResponseItem

from proxy.core.errors import BadRequest
from proxy.core.protocols.responses.listing import ListQuery, list_query, listed_items, page
from tests.helpers import OpenResponsesSchema

ITEM = pydantic.TypeAdapter(ResponseItem)
SCHEMA = OpenResponsesSchema()
TURNS: list[tuple[str, list[Any]]] = [
    (
        "resp_1",
        [
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "tp1.x"},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "w", "arguments": "{}"},
        ],
    ),
    (
        "resp_2",
        [
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            {"role": "assistant", "content": "It is sunny."},
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "Be brief."}],
            },
        ],
    ),
]


def test_every_item_gets_a_stable_id_a_status_and_content_parts_in_the_listed_shape() -> None:
    items = listed_items(TURNS)
    assert [i["type"] for i in items] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "message",
        "message",
    ]
    assert items[0]["content"] == [{"type": "input_text", "text": "Weather in Paris?"}]
    assert items[4]["content"] == [{"type": "output_text", "text": "It is sunny.", "annotations": []}]
    assert items[1]["id"] == "rs_1" and items[2]["id"] == "fc_1"  # (their own ids kept)
    assert items[0]["id"].startswith("msg_") and items[3]["id"].startswith("fco_")
    assert listed_items(TURNS) == items  # (derived ids: the same on every read)
    assert len({i["id"] for i in items}) == len(items)
    for item in items:
        ITEM.validate_python(item)
        assert SCHEMA.errors(item, "ItemField") == [], item


def test_pages_in_both_orders_with_after_and_before() -> None:
    items = [{"id": f"i{n}"} for n in range(5)]
    ids = lambda listed: [i["id"] for i in listed["data"]]  # noqa: E731
    desc = page(items, ListQuery(limit=2), "resp_1")
    assert ids(desc) == ["i4", "i3"] and desc["has_more"] is True
    assert (desc["first_id"], desc["last_id"], desc["object"]) == ("i4", "i3", "list")
    assert ids(page(items, ListQuery(order="asc", limit=2, after="i1"), "r")) == ["i2", "i3"]
    before = page(items, ListQuery(order="asc", limit=2, before="i4"), "r")
    assert ids(before) == ["i2", "i3"] and before["has_more"] is True
    between = page(items, ListQuery(order="asc", after="i0", before="i3"), "r")
    assert ids(between) == ["i1", "i2"] and between["has_more"] is False
    empty = page(items, ListQuery(after="i0"), "r")
    assert empty["data"] == [] and (empty["first_id"], empty["last_id"], empty["has_more"]) == (
        None,
        None,
        False,
    )


def test_the_query_as_openai_python_sends_it() -> None:
    query = list_query([("include[]", "reasoning.encrypted_content"), ("limit", "7"), ("order", "asc")])
    assert query == ListQuery("asc", 7, None, None, ("reasoning.encrypted_content",))
    assert list_query([]) == ListQuery("desc", 20)


@pytest.mark.parametrize(
    ("pairs", "param"),
    [
        ([("limit", "²")], "limit"),
        ([("limit", "-1")], "limit"),
        ([("limit", "5"), ("limit", "6")], "limit"),
        ([("order", "ASC")], "order"),
        ([("include", "everything")], "include"),
        ([("after", "")], "after"),
    ],
)
def test_a_bad_query_names_its_parameter(pairs: list[tuple[str, str]], param: str) -> None:
    with pytest.raises(BadRequest) as caught:
        list_query(pairs)
    assert caught.value.param == param and caught.value.status == 400


def test_a_cursor_that_names_no_item_is_a_400() -> None:
    with pytest.raises(BadRequest, match="No item with id 'x'") as caught:
        page([{"id": "a"}], ListQuery(before="x"), "resp_1")
    assert caught.value.param == "before"


def test_an_id_met_again_is_listed_once_so_every_cursor_is_unique() -> None:
    """A continuation whose input echoes its previous turn's output (or an `item_reference` to it)
    holds the same ids twice: listed twice, a page ending at the second gives an `after` that
    restarts past the first, and a client's paginator goes round forever."""
    echoed = [
        (
            "resp_1",
            [
                {"role": "user", "content": "Hi"},
                {"type": "message", "id": "msg_a", "role": "assistant", "content": "Hello"},
            ],
        ),
        (
            "resp_2",
            [
                {"type": "message", "id": "msg_a", "role": "assistant", "content": "Hello"},
                {"role": "user", "content": "More"},
            ],
        ),
    ]
    items = listed_items(echoed)
    ids = [i["id"] for i in items]
    assert len(ids) == 3 and len(set(ids)) == 3 and ids[1] == "msg_a"
    assert items[2]["content"] == [{"type": "input_text", "text": "More"}]
    # Paged one at a time by `after`, each item comes once and the walk ends.
    seen: list[str] = []
    after: str | None = None
    for _ in range(10):
        listed = page(items, ListQuery(order="asc", limit=1, after=after), "resp_2")
        seen += [i["id"] for i in listed["data"]]
        if not listed["has_more"]:
            break
        after = listed["last_id"]
    assert seen == ids
