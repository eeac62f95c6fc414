"""attnlab-bench --only long_context: the measurement runs for every contender (tiny T here;
the figures themselves come from the bench, not from a timed test)."""

from __future__ import annotations

import math

import pytest

from attnlab.bench.long_context import CONTENDERS, loglog_slope, measure_point, run_point


def test_the_loglog_slope_of_a_power_law_is_its_exponent() -> None:
    lengths = [512, 1024, 2048, 4096]
    assert loglog_slope(lengths, [t**2 * 3.0 for t in lengths]) == pytest.approx(2.0)
    assert loglog_slope(lengths, [t * 5.0 for t in lengths]) == pytest.approx(1.0)
    assert loglog_slope([512], [1.0]) is None


@pytest.mark.parametrize("name", list(CONTENDERS))
def test_every_contender_takes_a_training_step(name: str) -> None:
    result = measure_point(name, 128, "cpu")
    assert result["seconds"] > 0 and math.isfinite(result["peak_bytes"])


def test_a_point_runs_in_its_own_process() -> None:
    result = run_point("linear", 64, "cpu", threads=1)
    assert "error" not in result and result["seconds"] > 0
