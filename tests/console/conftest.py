from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest


# One headless Chromium for the console's browser tests (tests/console/test_ui*.py), launched by
# the first of them and closed after the last test of this folder: every test still gets a fresh
# browser context of its own (`page` in test_ui.py, or one it opens), so no cookie, storage or
# page is shared, only the browser process (a launch per module cost ~1-2 s each).
@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium is not None  # (test_ui.py's pytestmark skips these tests without it)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield browser
        browser.close()
