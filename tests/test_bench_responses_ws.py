"""bench/responses_ws.py: how a round's blocks become the figure against HTTP kept alive."""

from __future__ import annotations

from tests.helpers import bench_module


def test_a_transports_rounds_read_as_their_median_change_and_its_range() -> None:
    tool = bench_module("responses_ws")
    assert tool.percent_range([0.041, -0.01, 0.093]) == "+4.1% (−1.0…+9.3)"
    assert tool.percent_range([0.0]) == "+0.0% (+0.0…+0.0)"
    assert tool.BASE_PROBE == "HTTP, keep-alive"
