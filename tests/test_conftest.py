"""tests/conftest.py marks a test module `spawns` by what its code does (what it imports and
calls), never by a word in a string, a comment or a docstring."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import spawns

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize(
    "source",
    [
        "import subprocess\n",
        "from subprocess import run\n",
        "import asyncio\nasync def f() -> None:\n    await asyncio.create_subprocess_exec('redis-server')\n",
        "from tests.realredis import running_redis\n",
        "from tests import realredis\n",
        "from tests.helpers import start_serve\n",
        "from proxy.server.serving import BackgroundServer\n",
        "def test_x(start_proxy_process) -> None:\n    start_proxy_process()\n",
        "from playwright.sync_api import sync_playwright\n",
    ],
)
def test_a_module_that_starts_a_process_or_a_server_spawns(source: str) -> None:
    assert spawns(source)


@pytest.mark.parametrize(
    "source",
    [
        'FORBIDDEN = ("subprocess", "socket")\n',
        '"""Never starts a BackgroundServer."""\n',
        "# no subprocess here, no Popen either\nx = 1\n",
        "def test_x() -> None:\n    assert 'start_serve' not in 'text'\n",
    ],
)
def test_a_word_in_a_string_or_a_comment_does_not(source: str) -> None:
    assert not spawns(source)


def test_the_purity_test_is_not_marked_spawns() -> None:
    """Its allowlist names subprocess and the like as text: it starts nothing (a quick test)."""
    assert not spawns((TESTS / "core" / "test_purity.py").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "module", ["test_demo.py", "state/test_state.py", "server/test_serving.py", "console/test_ui.py"]
)
def test_the_tests_that_start_servers_and_programs_still_are(module: str) -> None:
    assert spawns((TESTS / module).read_text(encoding="utf-8"))
