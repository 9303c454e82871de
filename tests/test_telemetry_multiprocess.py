"""The directory `serve --workers N` shares between workers for metrics: made, used, removed."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from proxy.errors import ConfigError
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
