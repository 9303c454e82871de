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


def side(requests: int, cpu_us: float | None, errors: int = 0) -> dict[str, object]:
    return {"requests": requests, "errors": errors, "cpu_us_per_request": cpu_us}


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


def test_the_cost_is_the_ratio_of_cpu_per_request_and_none_when_a_side_had_errors() -> None:
    round_ = {"with": side(900, 1100.0), "without": side(1000, 1000.0)}
    assert pairs.cost_pct(round_) == pytest.approx(10.0)
    assert pairs.cost_pct({**round_, "with": side(900, 1100.0, errors=3)}) is None
    assert pairs.cost_pct({**round_, "without": side(0, None)}) is None
