"""MeasuredCostModel.predict_decode_steps_s (the simulator's decode windows) against pricing the
same plain-decode steps one `predict_step_s` call at a time: the same floats, bit for bit, and
the same step counts (priced steps, steps off the grid and by part)."""
from __future__ import annotations

import pytest

from profiler.device_spec import get_device_spec
from profiler.measured.shipped import build_measured
from profiler.model_spec import get_model_spec

CASES = [("llama-3-8b", "h100-sxm", 1), ("qwen3-32b", "rtx-pro-6000", 2)]


@pytest.mark.parametrize("model_name, device_name, tp", CASES)
@pytest.mark.parametrize("context", [[17], [100, 2_000, 31, 5], [7_000] * 40 + [120_000], [300_000, 290_000]])
def test_decode_steps_equal_step_by_step(model_name, device_name, tp, context):
    def fresh():
        return build_measured("auto", get_model_spec(model_name), get_device_spec(device_name), tp)

    one, run = fresh(), fresh()
    n = len(context)
    first, steps = 3, 37
    expected = [one.predict_step_s([1] * n, [c + j for c in context], [False] * n)
                for j in range(first, first + steps)]
    assert run.predict_decode_steps_s(context, steps, first) == expected
    assert (run.num_predictions, run.out_of_grid_steps, run.out_of_range) == (
        one.num_predictions, one.out_of_grid_steps, one.out_of_range)
    assert run.num_predictions == steps
    if min(context) > 200_000:  # past the decode tables' KV axes: every step counted off-grid
        assert run.out_of_grid_steps == steps and run.out_of_range["attention"] == steps
