"""Responses tools → chat tools (proxy.core.protocols.responses.tools): what the review gate is told
about the names a client knows its namespaced tools by. The mapping itself: test_responses_request.py."""

from __future__ import annotations

from proxy.core.protocols.responses.tools import client_names, map_tools
from proxy.core.review.rules import ClientTool, ReviewPolicy


def test_namespaced_tools_are_known_to_review_by_the_names_the_client_runs() -> None:
    mapped = map_tools(
        [
            {"type": "function", "name": "lookup"},
            {"type": "namespace", "name": "mail", "tools": [{"type": "function", "name": "send_email"}]},
            {"type": "namespace", "name": "ops", "tools": [{"type": "custom", "name": "run"}]},
        ],
        "omit",
    )
    names = client_names(mapped.names)
    assert names == {
        "mail__send_email": ClientTool("send_email", "mail"),
        "ops__run": ClientTool("run", "ops"),
    }
    for pattern in ("send_email", "mail.send_email", "mail.*", "mail__send_email"):
        assert ReviewPolicy((pattern,)).covers("mail__send_email", names), pattern
    assert not ReviewPolicy(("crm.send_email", "send")).covers("mail__send_email", names)
