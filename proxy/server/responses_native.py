"""The Responses front door to an upstream that serves the Responses API itself (providers.yaml
`responses: {mode: native}`): the request goes to the upstream's own `/responses` with the level
sent as `reasoning.effort`, and the answer comes back as it came — reasoning items and their
`encrypted_content` (the upstream's own blobs) untouched, errors unchanged in status and body.

The level: `X-Thinking-Level` decides when sent (the client's own `reasoning.effort` is replaced,
or removed when the entry has no value for that level: the level applied is then `none`, as on
chat); without it the client's `reasoning.effort` stands, or the default level applies when it
sent none.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from proxy.core import plan
from proxy.core.controls import LEVEL_HEADER, Level
from proxy.core.events import AccessRecord
from proxy.core.headers import filter_headers
from proxy.core.protocols.responses_request import EFFORT_LEVELS
from proxy.core.providers import Dialect
from proxy.core.review_rules import refuse_unreviewed_route
from proxy.core.stream import jsonio
from proxy.server.handlers import Proxy


def native_body(
    body: dict[str, Any], level: Level | None, dialect: Dialect, *, header: bool
) -> tuple[dict[str, Any] | None, Level | None]:
    """The body with the level applied (None: unchanged) and the level that applies."""
    reasoning = body.get("reasoning")
    client_effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    if not header and isinstance(client_effort, str):
        return None, EFFORT_LEVELS.get(client_effort)  # the client's own effort stands
    if level is None:
        return None, None
    effort = dialect.responses.effort_for(level)
    if effort is None and client_effort is None:
        return None, None
    changed = {k: v for k, v in reasoning.items() if k != "effort"} if isinstance(reasoning, dict) else {}
    if effort is not None:
        changed["effort"] = effort
    out = {**body, "reasoning": changed}
    if not changed:
        del out["reasoning"]
    return out, level if effort is not None else None


async def forward_native(
    proxy: Proxy,
    request: Request,
    arrival: plan.Arrival,
    intent: plan.Intent,
    tgt: plan.Target,
    dialect: Dialect,
    record: AccessRecord,
    started: float,
) -> Response:
    s = proxy.s
    if s.review is not None:  # the gate reads chat answers: a native answer would go around it
        refuse_unreviewed_route(arrival.method, arrival.path, tgt.body)
    assert tgt.parsed is not None
    header = LEVEL_HEADER in request.headers
    level = intent.controls.level
    if s.thinking is not None:
        # The key's ceiling and budget apply to the level the client's effort asks as well.
        asked = level if header else native_body(tgt.parsed, level, dialect, header=False)[1]
        decision = await proxy.thinking_policy(s.thinking, asked, record)
        if decision.rule is not None:
            level, header = decision.level, True
    changed, applied = native_body(tgt.parsed, level, dialect, header=header)
    record.level_requested = intent.controls.level.value if intent.controls.level is not None else None
    record.provider = dialect.name
    record.level = applied.value if applied is not None else "none"
    record.thinking_method = "params" if applied is not None else None
    headers = plan.thinking_headers(applied, dialect.name, "params", "responses")
    request_out = plan.UpstreamRequest(
        "POST",
        plan.upstream_url(arrival, tgt.destination, gateway_mode=s.gateway.enabled),
        # Only encodings the proxy decodes (Codex asks for zstd): identity, as on chat.
        [*filter_headers(tgt.headers, plan.DROP_REQUEST_CHAT), ("accept-encoding", "identity")],
        tgt.body if changed is None else jsonio.dumps(changed),
        client_chosen=tgt.destination.client_chosen,
    )
    extra = headers + record.response_headers
    return await proxy.relay(request.receive, request_out, record, started, extra_headers=extra, chat=None)
