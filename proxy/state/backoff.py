"""How the replicas' shared views (the console's feed, the sessions) treat a Redis that fails: after
a failure it is not asked again for a while — each replica answers from its own data meanwhile —
and the failure is logged at most once a minute, never with the exception's text (a URL in it
could carry the password)."""

from __future__ import annotations

import logging
import time

RETRY_AFTER_S = 5.0  # after a failure, Redis is not asked again for this long
WARN_EVERY_S = 60.0


class RedisBackoff:
    """One shared view's view of Redis's health. `what_then` completes the warning: what the
    replica does while Redis is down."""

    __slots__ = ("_down_until", "_logger", "_prefix", "_warned_at", "_what_then")

    def __init__(self, logger: logging.Logger, prefix: str, what_then: str) -> None:
        self._logger = logger
        self._prefix = prefix
        self._what_then = what_then
        self._down_until = 0.0
        self._warned_at = -WARN_EVERY_S

    @property
    def available(self) -> bool:
        return time.monotonic() >= self._down_until

    def failed(self, what: str, exc: BaseException) -> None:
        now = time.monotonic()
        self._down_until = now + RETRY_AFTER_S
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            self._logger.warning(
                "%s: Redis (THINKPROXY_STATE_URL) failed to %s: %s; %s",
                self._prefix,
                what,
                type(exc).__name__,
                self._what_then,
            )
