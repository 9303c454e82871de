"""Stored responses kept by reference (issue 41, item 2): a record holds its own turn and names the
one it continued; one past the cap is kept as a stub; records written before (format 1) still read."""

from __future__ import annotations

import orjson
import pytest

from proxy.core.protocols.responses.state import StoredResponse

TURN = [{"type": "message", "role": "user", "content": "And tomorrow?"}]
RESPONSE = {"id": "resp_2", "object": "response", "status": "completed", "model": "m", "output": []}


def test_a_record_names_the_response_it_continued() -> None:
    record = StoredResponse(TURN, RESPONSE, "resp_1")
    decoded = StoredResponse.decode(record.encode())
    assert decoded == record and decoded.previous == "resp_1"
    assert decoded.conversation() == TURN  # its own turn only: the earlier ones are resp_1's


def test_a_record_written_before_holds_its_whole_conversation() -> None:
    old = orjson.dumps({"v": 1, "input": TURN, "response": RESPONSE})
    decoded = StoredResponse.decode(old)
    assert decoded is not None and decoded.previous is None and decoded.conversation() == TURN


def test_a_stub_keeps_the_id_and_the_size_only() -> None:
    stub = StoredResponse(TURN, {**RESPONSE, "output": [{"type": "message"}]}, "resp_1").stub(5_000_000)
    decoded = StoredResponse.decode(stub.encode())
    assert decoded is not None and decoded.too_large == 5_000_000
    assert decoded.input == [] and decoded.previous is None and "output" not in decoded.response
    assert decoded.response["id"] == "resp_2"


@pytest.mark.parametrize(
    "raw",
    [
        {"v": 2, "input": [], "response": {}},  # format 2 always says what it continued (or null)
        {"v": 2, "previous": "", "input": [], "response": {}},
        {"v": 2, "previous": 7, "input": [], "response": {}},
        {"v": 2, "previous": None, "input": [], "response": {}, "too_large": -1},
        {"v": 3, "previous": None, "input": [], "response": {}},
    ],
)
def test_anything_else_is_refused(raw: dict[str, object]) -> None:
    assert StoredResponse.decode(orjson.dumps(raw)) is None
