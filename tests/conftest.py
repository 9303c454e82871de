from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.helpers import make_settings


@pytest.fixture
def proxy_client() -> Iterator[Callable[..., httpx.AsyncClient]]:
    """Factory: an httpx client talking to the proxy app in-process, upstream answered by `handler`."""
    from proxy.server.app import create_app

    def factory(handler: Callable[[httpx.Request], httpx.Response], **overrides: Any) -> httpx.AsyncClient:
        app = create_app(make_settings(**overrides), transport=httpx.MockTransport(handler))
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy.test")

    yield factory


# Tests that start a server (a proxy or a mock on a loopback port), a child process or a real
# program (Redis, Prometheus, Chromium, `thinkproxy serve`) are marked `spawns`: they are the slow
# ones, and `-m "not spawns"` gives the quick in-process suite. A module is marked by what it
# uses, read from its source once, so a new such test is marked without anyone remembering to.
SPAWNING = re.compile(
    r"\b(BackgroundServer|subprocess|start_serve|Popen|realredis|playwright|start_proxy_process)\b"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    spawning: dict[str, bool] = {}
    for item in items:
        path = str(item.path)
        if path not in spawning:
            spawning[path] = bool(SPAWNING.search(item.path.read_text(encoding="utf-8")))
        if spawning[path]:
            item.add_marker(pytest.mark.spawns)
