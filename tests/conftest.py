from __future__ import annotations

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
