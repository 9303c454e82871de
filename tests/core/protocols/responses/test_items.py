"""The items the Responses encoder streams (proxy.core.protocols.responses.items)."""

from __future__ import annotations

from proxy.core.protocols.responses.items import StreamItem, item_dict


def test_an_items_text_joined_once_stays_its_text_and_takes_more() -> None:
    """`joined` keeps the text as its one piece (written whole several times, joined once); what
    comes after (a call's later arguments) still joins on; an item without text stays without."""
    call = StreamItem("function_call", "fc_1", text=['{"a"', ":", "1"])
    assert call.joined() == '{"a":1'
    assert call.text == ['{"a":1']
    call.text.append("}")
    assert call.joined() == '{"a":1}' == item_dict(call, summary=False, tool_names={})["arguments"]
    empty = StreamItem("function_call", "fc_2")
    assert empty.joined() == ""
    assert empty.text == []
