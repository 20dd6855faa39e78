"""RooflineResidualRegressor: recovers a roofline, extrapolates linearly, corrects a shape effect."""
import numpy as np
import pytest
from sklearn.base import clone

from profiler.regressor import RooflineResidualRegressor
from profiler.timing import time_op


def roofline_data(tokens):
    """A GEMM-like op: 4 µs launch + 1.25 × max(compute, memory), compute = 1 µs a token,
    memory = 50 µs fixed weight read."""
    t_c, t_m = tokens * 1e-6, np.full(len(tokens), 50e-6)
    no_seqs = np.zeros(len(tokens))
    return np.column_stack((t_c, t_m, no_seqs, np.log(tokens))), 4e-6 + 1.25 * np.maximum(t_c, t_m)


def test_base_recovers_the_roofline_and_extrapolates_linearly():
    X, y = roofline_data(np.arange(1, 513, dtype=float))
    model = RooflineResidualRegressor(residual=False).fit(X, y)
    X_far, y_far = roofline_data(np.array([4096.0, 16384.0]))
    assert model.predict(X_far) == pytest.approx(y_far, rel=1e-3)
    assert model.base_coef_[0] == pytest.approx(4e-6, rel=1e-2)


def test_residual_learns_a_shape_effect_and_is_constant_beyond_the_range():
    tokens = np.arange(1, 513, dtype=float)
    X, y = roofline_data(tokens)
    y = y * np.where(tokens > 256, 1.3, 1.0)  # e.g. a kernel switch at 256 tokens
    model = RooflineResidualRegressor().fit(X, y)
    errors = np.abs(model.predict(X) / y - 1)
    assert np.median(errors) < 0.02
    X_far, y_far = roofline_data(np.array([2048.0]))
    assert model.predict(X_far)[0] == pytest.approx(1.3 * y_far[0], rel=0.05)


def test_estimator_conventions_and_errors():
    params = RooflineResidualRegressor(n_estimators=7).get_params()
    assert params["n_estimators"] == 7 and clone(RooflineResidualRegressor(max_depth=3)).max_depth == 3
    X, y = roofline_data(np.arange(1, 20, dtype=float))
    with pytest.raises(ValueError, match="must be > 0"):
        RooflineResidualRegressor().fit(X, -y)


def test_time_op_batches_short_calls_and_reports_per_call_seconds():
    """A fake clock: every call takes 1 µs (so 200 per 200-µs sample) or 1 ms (one per sample)."""
    fast = time_op(lambda: None, lambda fn, calls: calls * 1e-6, num_samples=5)
    assert fast.median_s == pytest.approx(1e-6) and fast.std_s == pytest.approx(0.0, abs=1e-15)
    assert (fast.num_samples, fast.calls_per_sample) == (5, 200)
    slow = time_op(lambda: None, lambda fn, calls: calls * 1e-3)
    assert slow.median_s == 1e-3 and slow.calls_per_sample == 1 and slow.num_samples == 7
    with pytest.raises(ValueError):
        time_op(lambda: None, num_samples=0)
