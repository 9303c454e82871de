"""The thinking policy's refusals (proxy.policy.service raises them): OpenAI-shaped errors that
carry the rule `X-Thinking-Policy` names."""

from __future__ import annotations

from proxy.core.errors import ProxyError


class BudgetExceeded(ProxyError):
    status = 429
    type = "reasoning_budget_exceeded"
    code = "reasoning_budget_exceeded"

    def __init__(self, message: str, *, retry_after: int, rule: str) -> None:
        super().__init__(message)
        self.retry_after = retry_after  # seconds, for the Retry-After header
        self.rule = rule  # for X-Thinking-Policy


class RuleRefusal(ProxyError):
    """A request the key's rule refuses whenever it is sent (a 403, not a 429: the rule does not
    change with time, retrying cannot help, and SDKs retry a 429 on their own)."""

    status = 403

    def __init__(self, message: str, *, rule: str) -> None:
        super().__init__(message)
        self.rule = rule  # for X-Thinking-Policy


class ThinkingOffUnavailable(RuleRefusal):
    """`max_level: off` for a request whose upstream model cannot turn thinking off (its
    providers.yaml entry offers no `off` level): refused, since any body sent would think."""

    type = "thinking_off_unavailable"
    code = "thinking_off_unavailable"


class LevelAboveCeiling(RuleRefusal):
    """A request relayed as it came (its body is never rewritten) whose own thinking knobs ask a
    level above its key's `max_level`: it cannot be sent at the ceiling, so it is refused."""

    type = "thinking_level_above_ceiling"
    code = "thinking_level_above_ceiling"
