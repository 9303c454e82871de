"""Shared test helpers (imported by tests; fixtures live in conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from proxy.settings import Settings


def make_settings(**overrides: Any) -> Settings:
    """Settings isolated from the machine's environment and .env file."""
    base: dict[str, Any] = {"upstream_base_url": "https://api.deepseek.com/v1", "trace": "off"}
    base.update(overrides)
    return Settings(_env_file=None, **base)  # type: ignore[call-arg]


class Recorder:
    """An httpx.MockTransport handler that records every request and answers with `respond`."""

    def __init__(self, respond: Callable[[httpx.Request], httpx.Response]) -> None:
        self.respond = respond
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        return self.respond(request)
