"""bench/common.py: what a measurement says of the machine it ran on, and how it reads a process's CPU."""

from __future__ import annotations

import os
from pathlib import Path

from tests.helpers import bench_module


def test_the_machine_line_names_the_cpu_its_cpus_and_caches_in_readable_units(tmp_path: Path) -> None:
    common = bench_module("common")
    assert [common.cache_size(size) for size in ("32K", "1024K", "1536K", "32768K", "2M", "²K")] == [
        "32 KiB",
        "1 MiB",
        "1536 KiB",
        "32 MiB",
        "2M",
        "²K",
    ]
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Some CPU 9000\n\nprocessor\t: 1\nmodel name\t: Some CPU 9000\n"
    )
    caches = tmp_path / "cache"
    for index, (level, kind, size) in enumerate(
        [(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "1024K")]
    ):
        folder = caches / f"index{index}"
        folder.mkdir(parents=True)
        for name, value in (("level", level), ("type", kind), ("size", size)):
            (folder / name).write_text(f"{value}\n")
    (caches / "index3").mkdir()  # (an index the kernel lists without its files: left out)
    cpus = f"{os.cpu_count() or '?'} CPUs"
    assert common.machine(cpuinfo, caches) == f"Some CPU 9000, {cpus}, L1d 32 KiB, L1i 32 KiB, L2 1 MiB"
    # No model named (a blank one, or none: most ARM kernels), nothing readable: said so, not guessed.
    cpuinfo.write_text("model name\t:\n")
    assert common.machine(cpuinfo, tmp_path / "absent") == f"unknown CPU, {cpus}"
    assert common.machine(tmp_path / "absent", tmp_path / "absent") == f"unknown CPU, {cpus}"


def test_the_exact_cpu_reading_is_this_processs_time_on_a_core_and_grows_with_work() -> None:
    common = bench_module("common")
    before = common.cpu_seconds_exact(os.getpid())
    total = 0
    for i in range(2_000_000):  # (work of its own, tens of milliseconds: a clock tick is 10)
        total += i
    after = common.cpu_seconds_exact(os.getpid())
    assert 0 < before < after
    assert common.cpu_seconds_exact(2**22 + 12345) == 0.0  # (no such process: nothing, no error)
