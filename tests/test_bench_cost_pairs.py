"""bench/cost_pairs.py: how a pair is read from the command line and how a round becomes a cost."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # its siblings (common, loadgen, servers) by their own names
    try:
        spec = importlib.util.spec_from_file_location("thinkproxy_bench_cost_pairs", BENCH / "cost_pairs.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


pairs = load()


def slice_(build: str, cpu_us: float | None, busy: float = 100.0) -> dict[str, object]:
    return {"build": build, "cpu_us_per_request": cpu_us, "core0_busy_pct": busy}


def test_a_pair_of_ones_own_is_settings_before_vs_against_those_after() -> None:
    pair = pairs.custom_pair("THINKPROXY_UI=true,THINKPROXY_TRACE=off vs THINKPROXY_UI=false")
    assert pair.with_env == {"THINKPROXY_UI": "true", "THINKPROXY_TRACE": "off"}
    assert pair.without_env == {"THINKPROXY_UI": "false"}
    # An empty side is the defaults; PYTHONPATH runs that side from another checkout.
    other = pairs.custom_pair(" vs PYTHONPATH=/tmp/before")
    assert other.with_env == {} and other.without_env == {"PYTHONPATH": "/tmp/before"}


@pytest.mark.parametrize(
    "text",
    ["THINKPROXY_UI=true", "A=1 vs B=2 vs C=3", "UI=true vs ", "THINKPROXY_UI vs ", "HOME=/x vs "],
)
def test_a_malformed_pair_is_refused_with_what_was_expected(text: str) -> None:
    with pytest.raises(ValueError, match="--compare"):
        pairs.custom_pair(text)


def test_each_slice_with_the_feature_is_compared_with_the_mean_of_its_neighbours() -> None:
    # The machine slows down steadily: the neighbours' mean cancels that drift.
    slices = [slice_("without", 1000.0), slice_("with", 1102.5), slice_("without", 1100.0)]
    slices += [slice_("with", 1207.5), slice_("without", 1200.0)]
    assert pairs.slice_costs(slices) == [pytest.approx(5.0), pytest.approx(5.0)]


def test_a_slice_is_compared_only_when_it_and_its_neighbours_were_saturated_and_counted() -> None:
    slices = [slice_("without", 1000.0), slice_("with", 1050.0), slice_("without", 1000.0, busy=60.0)]
    assert pairs.slice_costs(slices) == []
    slices = [slice_("without", None), slice_("with", 1050.0), slice_("without", 1000.0)]
    assert pairs.slice_costs(slices) == []
    # (The first and last slice have one neighbour only.)
    assert pairs.slice_costs([slice_("with", 1.0), slice_("without", 1.0)]) == []
