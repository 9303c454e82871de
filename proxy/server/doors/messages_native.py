"""The Messages front door to an upstream that serves the Anthropic Messages API itself
(providers.yaml `messages: {mode: native}`: Anthropic, DeepSeek's `/anthropic`): the request goes
to the upstream's own `/v1/messages` with the level as Anthropic's `thinking` (and
`output_config.effort`), the key as `x-api-key`, `anthropic-version` / `anthropic-beta` as they
came, and the thinking blocks the proxy signed left out (proxy.core.protocols.messages.native).
The answer comes back as the upstream sent it: thinking blocks, their signatures and every error
unchanged in status and body. No trace is added and the review gate cannot read it: with a review
policy set, a native `/v1/messages` that could call tools is refused, as a native `/v1/responses` is.
The model's own rules (a model that always thinks: forced tool use refused, an off not applied and
said so) apply before the hop.
"""

from __future__ import annotations

from typing import Any

from proxy.core.config.providers import Dialect
from proxy.core.controls import Level
from proxy.core.events import AccessRecord
from proxy.core.plan import request as plan
from proxy.core.protocols.messages.native import (
    model_rules,
    native_body,
    native_headers,
    strip_proxy_thinking,
)
from proxy.policy.service import ThinkingPolicy
from proxy.server.doors.native import NativeRoute, Planned
from proxy.server.policy_gate import judge_messages

MESSAGES_PATH = "/v1/messages"


def _level_body(body: dict[str, Any], level: Level | None, dialect: Dialect, header: bool) -> Planned:
    return native_body(body, level, dialect.messages, header=header)


def _rules(
    body: dict[str, Any], level: Level | None, dialect: Dialect, header: bool
) -> list[tuple[str, str]]:
    return model_rules(body, level, dialect.messages, header=header)


async def _judge(
    thinking: ThinkingPolicy, body: dict[str, Any], planned: Planned, dialect: Dialect, record: AccessRecord
) -> Planned:
    return await judge_messages(thinking, body, planned, dialect.messages, record)


def _url(arrival: plan.Arrival, tgt: plan.Target, dialect: Dialect, gateway_mode: bool) -> str:
    # The client's query (Claude Code's `?beta=true`) is Anthropic's own: it goes on, as on any route.
    query = plan.scrub_credentials(arrival.query) if gateway_mode else arrival.query
    return dialect.messages.url(tgt.destination.base_url) + (f"?{query.decode('latin-1')}" if query else "")


# The Messages door's own parts of the native forwarding (proxy.server.doors.native.forward_native):
# the thinking blocks left out are not counted in a header; the review rules read the Messages path.
NATIVE = NativeRoute(
    "messages",
    _level_body,
    _judge,
    strip_proxy_thinking,
    _url,
    native_headers,
    review_path=MESSAGES_PATH,
    rules=_rules,
)
