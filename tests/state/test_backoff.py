"""A failing Redis is not asked again for a while, and warned of once a minute without its text."""

from __future__ import annotations

import logging

import pytest

from proxy.state import backoff
from proxy.state.backoff import RedisBackoff


def test_a_failure_holds_redis_off_and_warns_once_per_minute(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1000.0]
    monkeypatch.setattr(backoff.time, "monotonic", lambda: now[0])
    health = RedisBackoff(logging.getLogger("thinkproxy.test"), "view", "the replica answers alone")
    assert health.available
    with caplog.at_level(logging.WARNING, logger="thinkproxy.test"):
        health.failed("read", ConnectionError("redis://:secret@host"))
        assert not health.available
        now[0] += backoff.RETRY_AFTER_S
        assert health.available
        health.failed("write", ConnectionError("again"))  # within the minute: no second warning
        now[0] += backoff.WARN_EVERY_S
        health.failed("write", ConnectionError("later"))
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        "view: Redis (THINKPROXY_STATE_URL) failed to read: ConnectionError; the replica answers alone",
        "view: Redis (THINKPROXY_STATE_URL) failed to write: ConnectionError; the replica answers alone",
    ]
    assert "secret" not in caplog.text
