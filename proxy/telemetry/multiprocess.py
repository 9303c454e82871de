"""The directory prometheus-client's multiprocess mode shares between `serve` workers.

Imports nothing of prometheus-client: the variable must be set before any worker imports it
(prometheus-client picks its value store when first imported).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from proxy.errors import ConfigError

ENV = "PROMETHEUS_MULTIPROC_DIR"


@contextmanager
def metrics_directory(*, metrics: bool, workers: int) -> Iterator[str | None]:
    """With metrics on and several workers, a fresh private directory in PROMETHEUS_MULTIPROC_DIR
    for the duration of the block, removed afterwards. An operator's own PROMETHEUS_MULTIPROC_DIR
    is used as it is and left alone (clearing it between runs is then theirs to do)."""
    given = os.environ.get(ENV)
    if given or not metrics or workers <= 1:
        yield given or None
        return
    try:
        path = tempfile.mkdtemp(prefix="thinkproxy-metrics-")
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
