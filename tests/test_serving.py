"""proxy.serving: what `serve` sets up around uvicorn."""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest

from proxy.app import create_app
from proxy.limits import EdgeLimits
from proxy.serving import limits_of, raise_fd_limit
from tests.helpers import make_settings


@pytest.fixture
def low_soft_limit() -> Iterator[int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"the hard RLIMIT_NOFILE here is {hard}, too low to test raising the soft one")
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
    yield hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_fd_limit_is_raised_to_what_the_settings_need(low_soft_limit: int) -> None:
    assert raise_fd_limit(2048) is None
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 2048


def test_a_hard_limit_too_low_is_a_warning(low_soft_limit: int) -> None:
    if low_soft_limit == resource.RLIM_INFINITY:
        pytest.skip("no hard RLIMIT_NOFILE here")
    warning = raise_fd_limit(low_soft_limit + 1)
    assert warning is not None and "THINKPROXY_MAX_CLIENT_CONNECTIONS" in warning
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == low_soft_limit


def test_background_servers_take_the_edge_limits_from_the_apps_settings() -> None:
    app = create_app(make_settings(header_timeout=1.5, max_header_count=20, max_body_bytes=1000))
    assert limits_of(app) == EdgeLimits(
        max_header_bytes=64 * 1024,
        max_header_count=20,
        header_timeout=1.5,
        body_timeout=60.0,
        max_connections=4096,
        drain_bytes=2000,
    )
    assert limits_of(object()) == EdgeLimits()  # type: ignore[arg-type]
