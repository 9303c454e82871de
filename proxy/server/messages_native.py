"""The Messages front door to an upstream that serves the Anthropic Messages API itself
(providers.yaml `messages: {mode: native}`: Anthropic, DeepSeek's `/anthropic`): the request goes
to the upstream's own `/v1/messages` with the level as Anthropic's `thinking` (and
`output_config.effort`), the key as `x-api-key`, `anthropic-version` / `anthropic-beta` as they
came, and the thinking blocks the proxy signed left out (proxy.core.protocols.messages_native).
The answer comes back as the upstream sent it: thinking blocks, their signatures and every error
unchanged in status and body. No trace is added and the review gate cannot read it: with a review
policy set, a native `/v1/messages` that could call tools is refused, as a native `/v1/responses` is.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from proxy.core import plan
from proxy.core.controls import LEVEL_HEADER
from proxy.core.events import AccessRecord
from proxy.core.headers import filter_headers
from proxy.core.native_usage import UsageReader
from proxy.core.protocols.messages_native import native_body, native_headers, strip_proxy_thinking
from proxy.core.providers import Dialect
from proxy.core.review_rules import refuse_unreviewed_route
from proxy.core.stream import jsonio
from proxy.server.handlers import Proxy
from proxy.server.policy_gate import judge_messages

MESSAGES_PATH = "/v1/messages"


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
        refuse_unreviewed_route(arrival.method, MESSAGES_PATH, tgt.body)
    assert tgt.parsed is not None
    rule = dialect.messages
    header = LEVEL_HEADER in request.headers
    level = intent.controls.level
    changed, applied = native_body(tgt.parsed, level, rule, header=header)
    if s.thinking is not None:  # the key's ceiling and budget judge the body that would go
        changed, applied = await judge_messages(s.thinking, tgt.parsed, (changed, applied), rule, record)
    stripped, _ = strip_proxy_thinking(changed if changed is not None else tgt.parsed)
    body = stripped if stripped is not None else changed
    record.level_requested = intent.controls.level.value if intent.controls.level is not None else None
    record.provider = dialect.name
    record.level = applied.value if applied is not None else "none"
    record.thinking_method = "params" if applied is not None else None
    headers = plan.thinking_headers(applied, dialect.name, "params", "messages")
    # The client's query (Claude Code's `?beta=true`) is Anthropic's own: it goes on, as on any route.
    query = plan.scrub_credentials(arrival.query) if s.gateway.enabled else arrival.query
    url = rule.url(tgt.destination.base_url) + (f"?{query.decode('latin-1')}" if query else "")
    request_out = plan.UpstreamRequest(
        "POST",
        url,
        [
            *native_headers(filter_headers(tgt.headers, plan.DROP_REQUEST_CHAT)),
            ("accept-encoding", "identity"),
        ],
        tgt.body if body is None else jsonio.dumps(body),
        client_chosen=tgt.destination.client_chosen,
    )
    extra = headers + record.response_headers
    # (its answer's usage is read as it goes by: budgets and the usage book count it)
    usage = UsageReader(limit=s.settings.max_response_bytes)
    return await proxy.relay(
        request.receive, request_out, record, started, extra_headers=extra, chat=None, usage=usage
    )
