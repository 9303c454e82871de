"""The Responses front door to an upstream that serves the Responses API itself (providers.yaml
`responses: {mode: native}`): the request goes to the upstream's own `/responses` with the level
sent as `reasoning.effort`, and the answer comes back as it came — reasoning items and their
`encrypted_content` (the upstream's own blobs) untouched, errors unchanged in status and body.

The level: `X-Thinking-Level` decides when sent (the client's own `reasoning.effort` is replaced,
or removed when the entry has no value for that level: the level applied is then `none`, as on
chat); without it the client's `reasoning.effort` stands, or the default level applies when it
sent none.

The proxy's own sealed blobs (`tp1.`: reasoning items and compaction items a bridged answer of
this proxy gave the client, proxy.core.protocols.responses.state) are left out of the input before
the hop (`strip_proxy_blobs`): the upstream did not make them and refuses them ("The encrypted
content … could not be verified"), as the Messages door leaves out the thinking blocks it signed.
A native answer carries no trace, so how many were left out is said in a header
(`BLOBS_LEFT_OUT_HEADER`), as the bridged doors name the tools they leave out.

In gateway mode the request is checked against the ids its tenant created first (previous
response, referenced items, no conversation object: proxy.server.doors.native_owners), and the answer's
ids are recorded as that tenant's as they go by.
"""

from __future__ import annotations

from typing import Any

from proxy.core import seal
from proxy.core.config.providers import Dialect
from proxy.core.controls import Level
from proxy.core.plan import request as plan
from proxy.core.protocols.responses.request import EFFORT_LEVELS
from proxy.server.doors.native import NativeRoute, Planned
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


def _level_body(body: dict[str, Any], level: Level | None, dialect: Dialect, header: bool) -> Planned:
    return native_body(body, level, dialect, header=header)


def _url(arrival: plan.Arrival, tgt: plan.Target, dialect: Dialect, gateway_mode: bool) -> str:
    return plan.upstream_url(arrival, tgt.destination, gateway_mode=gateway_mode)


# The Responses door's own parts of the native forwarding (proxy.server.doors.native.forward_native).
NATIVE = NativeRoute(
    "responses", _level_body, judge_responses, strip_proxy_blobs, _url, left_out_header=BLOBS_LEFT_OUT_HEADER
)
