"""The directory prometheus-client's multiprocess mode shares between `serve` workers.

Imports nothing of prometheus-client: the variable must be set before any worker imports it
(prometheus-client picks its value store when first imported).

A `serve` that is killed (SIGKILL, the OOM killer) cannot remove its directory; its name says
whose it is (`thinkproxy-metrics-<pid>.<pid namespace>-…`), so the next start removes the
directories of processes that no longer exist.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from proxy.core.errors import ConfigError

ENV = "PROMETHEUS_MULTIPROC_DIR"
PREFIX = "thinkproxy-metrics-"
_OWNED = re.compile(re.escape(PREFIX) + r"(\d+)\.(\d+)-")

logger = logging.getLogger("thinkproxy.metrics")


def _pid_namespace() -> int:
    """This process's pid namespace (0 where there is no such thing): a pid names a process only
    within its namespace, and containers sharing one temp directory have one each."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def remove_stale_directories(parent: str | None = None) -> list[str]:
    """Remove the metrics directories, in `parent` (default: the temp directory), that a `serve`
    of this user and pid namespace left behind when it was killed; returns their paths.
    Directories of other users or namespaces, of live processes, or named otherwise, are left."""
    parent = parent or tempfile.gettempdir()
    namespace = _pid_namespace()
    removed = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    for entry in entries:
        owner = _OWNED.match(entry.name)
        if owner is None or int(owner[2]) != namespace or _alive(int(owner[1])):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        if not Path(entry.path).exists():
            removed.append(entry.path)
    return removed


@contextmanager
def metrics_directory(*, metrics: bool, workers: int) -> Iterator[str | None]:
    """With metrics on and several workers, a fresh private directory in PROMETHEUS_MULTIPROC_DIR
    for the duration of the block, removed afterwards (and, had an earlier run been killed, its
    directory first). An operator's own PROMETHEUS_MULTIPROC_DIR is used as it is and left alone
    (clearing it between runs is then theirs to do)."""
    given = os.environ.get(ENV)
    if given or not metrics or workers <= 1:
        yield given or None
        return
    stale = remove_stale_directories()
    if stale:
        logger.info("removed %d metrics directories left by killed runs: %s", len(stale), ", ".join(stale))
    try:
        path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}.{_pid_namespace()}-")
    except OSError as exc:
        raise ConfigError(
            f"cannot create the metrics directory the {workers} workers share ({exc}); set "
            f"{ENV} to a writable directory, or THINKPROXY_METRICS=false"
        ) from None
    os.environ[ENV] = path
    try:
        yield path
    finally:
        os.environ.pop(ENV, None)
        shutil.rmtree(path, ignore_errors=True)
