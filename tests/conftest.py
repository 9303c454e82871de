from __future__ import annotations

import ast
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
# ones, and `-m "not spawns"` gives the quick in-process suite. A module is marked by what its code
# uses — the modules it imports, the names it calls or asks for as fixtures, read from its syntax
# tree once — so a new such test is marked without anyone remembering to, and a word in a string,
# a comment or a docstring (the purity test's allowlist names subprocess) marks nothing. A module
# that spawns in a way these miss says so itself: `pytestmark = pytest.mark.spawns`.
SPAWNING_MODULES = ("subprocess", "multiprocessing", "playwright", "tests.realredis")
SPAWNING_NAMES = frozenset(
    {
        "BackgroundServer",  # proxy.server.serving: uvicorn on a thread, on a loopback port
        "start_serve",  # tests.helpers: `thinkproxy serve` as a child process
        "start_proxy_process",
        "Popen",
        "create_subprocess_exec",  # asyncio's child processes
        "create_subprocess_shell",
    }
)


def spawns(source: str) -> bool:
    """Whether a test module's code starts a server, a child process or a real program."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names = [base] + [f"{base}.{alias.name}" for alias in node.names] + [a.name for a in node.names]
        elif isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.arg):  # a fixture that spawns, asked for by name
            names = [node.arg]
        else:
            continue
        for name in names:
            if name in SPAWNING_NAMES or any(
                name == module or name.startswith(module + ".") for module in SPAWNING_MODULES
            ):
                return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    spawning: dict[str, bool] = {}
    for item in items:
        path = str(item.path)
        if path not in spawning:  # (a test module: pytest imported it, so it parses)
            spawning[path] = item.path.suffix == ".py" and spawns(item.path.read_text(encoding="utf-8"))
        if spawning[path]:
            item.add_marker(pytest.mark.spawns)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """A test module's own real redis-server (tests/realredis.py), by its URL (database 0)."""
    from tests.realredis import running_redis

    with running_redis() as server:
        yield server.url
