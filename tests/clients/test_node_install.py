"""tests/clients/conftest.py installs the Node clients itself: when, and what a failure says."""

from __future__ import annotations

import os
from pathlib import Path

from tests.clients.conftest import NODE_DIR, install_clients, needs_install


def lockfile(folder: Path, installed_at: float | None, locked_at: float) -> None:
    (folder / "package-lock.json").write_text("{}")
    os.utime(folder / "package-lock.json", (locked_at, locked_at))
    if installed_at is not None:
        (folder / "node_modules").mkdir()
        (folder / "node_modules" / ".package-lock.json").write_text("{}")
        os.utime(folder / "node_modules" / ".package-lock.json", (installed_at, installed_at))


def test_never_installed_needs_an_install(tmp_path: Path) -> None:
    lockfile(tmp_path, None, 1_000)
    assert needs_install(tmp_path)


def test_an_install_newer_than_the_lockfile_is_kept(tmp_path: Path) -> None:
    lockfile(tmp_path, 2_000, 1_000)
    assert not needs_install(tmp_path)


def test_a_lockfile_changed_since_the_install_installs_again(tmp_path: Path) -> None:
    lockfile(tmp_path, 1_000, 2_000)
    assert needs_install(tmp_path)


def test_a_failed_install_says_what_npm_said(tmp_path: Path) -> None:
    npm = tmp_path / "npm"
    npm.write_text(
        "#!/bin/sh\necho 'npm ERR! code ENOTFOUND' >&2\necho 'npm ERR! network unreachable' >&2\nexit 1\n"
    )
    npm.chmod(0o755)
    said: list[str] = []
    failure = install_clients(tmp_path, str(npm), said.append)
    assert failure is not None and "failed (1)" in failure and "unreachable" in failure
    assert said and "npm ci" in said[0]


def test_the_clients_folder_has_the_committed_lockfile() -> None:
    assert (NODE_DIR / "package-lock.json").is_file() and (NODE_DIR / "package.json").is_file()
