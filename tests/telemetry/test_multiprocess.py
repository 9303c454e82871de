"""The directory `serve --workers N` shares between workers for metrics: made, used, removed."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from proxy.core.errors import ConfigError
from proxy.telemetry.multiprocess import ENV, metrics_directory


def test_several_workers_get_a_private_directory_removed_afterwards(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    with metrics_directory(metrics=True, workers=2) as path:
        assert path is not None and Path(path).is_dir() and os.environ[ENV] == path
        (Path(path) / "counter_1.db").write_bytes(b"x")
    assert not Path(path).exists() and ENV not in os.environ


@pytest.mark.parametrize(("metrics", "workers"), [(True, 1), (False, 4)])
def test_one_worker_or_metrics_off_needs_no_directory(
    monkeypatch: pytest.MonkeyPatch, metrics: bool, workers: int
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    with metrics_directory(metrics=metrics, workers=workers) as path:
        assert path is None and ENV not in os.environ


def test_an_operators_own_directory_is_used_and_left_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ENV, str(tmp_path))
    (tmp_path / "keep.db").write_bytes(b"x")
    with metrics_directory(metrics=True, workers=2) as path:
        assert path == str(tmp_path)
    assert (tmp_path / "keep.db").exists() and os.environ[ENV] == str(tmp_path)


def test_an_unwritable_temp_directory_is_a_config_error_saying_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    directory = metrics_directory(metrics=True, workers=2)
    with pytest.raises(ConfigError, match="PROMETHEUS_MULTIPROC_DIR to a writable directory"):
        directory.__enter__()
    assert ENV not in os.environ


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_directories_of_killed_runs_are_removed_at_the_next_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    namespace = os.stat("/proc/self/ns/pid").st_ino if Path("/proc/self/ns/pid").exists() else 0
    dead = dead_pid()
    killed = tmp_path / f"thinkproxy-metrics-{dead}.{namespace}-abc"
    living = tmp_path / f"thinkproxy-metrics-{os.getpid()}.{namespace}-def"  # this process: alive
    elsewhere = tmp_path / f"thinkproxy-metrics-{dead}.{namespace + 1}-ghi"  # another container's
    older = tmp_path / "thinkproxy-metrics-jkl"  # no owner in its name: cannot tell
    for directory in (killed, living, elsewhere, older):
        directory.mkdir()
        (directory / "counter_1.db").write_bytes(b"x")
    with metrics_directory(metrics=True, workers=2) as path:
        assert path is not None and Path(path).name.startswith(f"thinkproxy-metrics-{os.getpid()}.")
        assert not killed.exists()
        assert living.exists() and elsewhere.exists() and older.exists()
    assert not Path(path).exists()
