"""The Responses front door to an upstream that serves the Responses API itself (providers.yaml
`responses: {mode: native}`): the request goes to the upstream's own `/responses` with the level
sent as `reasoning.effort`, and the answer comes back as it came — reasoning items and their
`encrypted_content` (the upstream's own blobs) untouched, errors unchanged in status and body.

The level: `X-Thinking-Level` decides when sent (the client's own `reasoning.effort` is replaced,
or removed when the entry has no value for that level: the level applied is then `none`, as on
chat); without it the client's `reasoning.effort` stands, or the default level applies when it
sent none.

The proxy's own sealed blobs (`tp1.`: reasoning items and compaction items a bridged answer of
this proxy gave the client, proxy.core.protocols.responses_state) are left out of the input before
the hop (`strip_proxy_blobs`): the upstream did not make them and refuses them ("The encrypted
content … could not be verified"), as the Messages door leaves out the thinking blocks it signed.
A native answer carries no trace, so how many were left out is said in a header
(`BLOBS_LEFT_OUT_HEADER`), as the bridged doors name the tools they leave out.

In gateway mode the request is checked against the ids its tenant created first (previous
response, referenced items, no conversation object: proxy.server.native_owners), and the answer's
ids are recorded as that tenant's as they go by.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from proxy.core import plan, seal
from proxy.core.controls import LEVEL_HEADER, Level
from proxy.core.events import AccessRecord
from proxy.core.headers import filter_headers
from proxy.core.native_usage import UsageReader
from proxy.core.protocols.responses_request import EFFORT_LEVELS
from proxy.core.providers import Dialect
from proxy.core.review_rules import refuse_unreviewed_route
from proxy.core.stream import jsonio
from proxy.server.asgi import RelayResponse
from proxy.server.handlers import Proxy
from proxy.server.native_owners import NativeOwners
from proxy.server.policy_gate import judge_responses

# How many input items carrying the proxy's own blob were left out before the hop (when any).
BLOBS_LEFT_OUT_HEADER = "x-thinking-blobs-left-out"


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


def strip_proxy_blobs(body: dict[str, Any]) -> tuple[dict[str, Any] | None, int]:
    """The body without the input items that carry a blob of the proxy's own (None: none found),
    and how many were left out. A reasoning item's or compaction item's `encrypted_content` is
    the blob; the upstream's own blobs (OpenAI's `gAAAA…`) and every other item pass untouched."""
    items = body.get("input")
    if not isinstance(items, list):
        return None, 0
    kept = [item for item in items if not _proxy_sealed(item)]
    if len(kept) == len(items):
        return None, 0
    return {**body, "input": kept}, len(items) - len(kept)


def _proxy_sealed(item: Any) -> bool:
    return isinstance(item, dict) and seal.is_ours(item.get("encrypted_content"))


async def forward_native(
    proxy: Proxy,
    request: Request,
    arrival: plan.Arrival,
    intent: plan.Intent,
    tgt: plan.Target,
    dialect: Dialect,
    record: AccessRecord,
    started: float,
    owners: NativeOwners | None = None,
) -> Response:
    s = proxy.s
    if s.review is not None:  # the gate reads chat answers: a native answer would go around it
        refuse_unreviewed_route(arrival.method, arrival.path, tgt.body)
    assert tgt.parsed is not None
    # Gateway mode: stored state (a response, its items) is used only by the tenant that created it.
    tenants = owners.tenants(request.headers.items()) if owners is not None and owners.active else None
    if owners is not None and tenants is not None:
        await owners.check_continuation(tenants, tgt.parsed)
    header = LEVEL_HEADER in request.headers
    level = intent.controls.level
    changed, applied = native_body(tgt.parsed, level, dialect, header=header)
    if s.thinking is not None:  # the key's ceiling and budget judge the body that would go
        changed, applied = await judge_responses(s.thinking, tgt.parsed, (changed, applied), dialect, record)
    stripped, left_out = strip_proxy_blobs(changed if changed is not None else tgt.parsed)
    changed = stripped if stripped is not None else changed
    if left_out:
        record.response_headers.append((BLOBS_LEFT_OUT_HEADER, str(left_out)))
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
    # (its answer's usage is read as it goes by: budgets and the usage book count it)
    usage = UsageReader(limit=s.settings.max_response_bytes)
    response = await proxy.relay(
        request.receive, request_out, record, started, extra_headers=extra, chat=None, usage=usage
    )
    if (
        owners is not None
        and tenants is not None
        and tgt.parsed.get("store") is not False
        and isinstance(response, RelayResponse)
        and 200 <= response.status_code < 300
    ):
        response.produce = owners.tap(response.produce, tenants.current)  # (whose id this is)
    return response
