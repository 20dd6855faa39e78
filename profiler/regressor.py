"""`RooflineResidualRegressor`: one op's time from its roofline terms, corrected by its shape.

    time = (w₀ + w₁ max(t_c, t_m) + w₂ t_c + w₃ t_m + w₄ n_seq) × exp(r(log key))

t_c = FLOPs / peak FLOP/s and t_m = bytes / bandwidth are the op's roofline terms at the
profile's device rates; n_seq counts the sequences an attention call walks (1 for a prefill
sequence, B for a decode batch, 0 for other ops), each with its own set-up (block-table walk,
kernel program, or a Python loop turn on the engine's CPU path). The bracket (the *base*) is a
non-negative linear model fitted for relative error (scikit-learn
`LinearRegression(positive=True)` with weights 1/y²): a fixed latency, the roofline bound and its
two sides, and a per-sequence cost, so it extrapolates linearly in the work, past
the profiled shapes — where Vidur's random forests return their edge values. `r` is a
scikit-learn gradient-boosted tree ensemble on the log shape key (and, for ops sized by one count,
its tile alignment), fitted to log(y / base): it
captures what the roofline misses inside the profiled range (cache effects, tile quantisation,
kernel switches) and, being trees, is constant beyond it, so outside the range the base's slope
carries the prediction with the edge's correction factor.

Follows the scikit-learn estimator conventions (STYLE.md): hyper-parameters in `__init__`, `fit`
returns self, learned state in attributes ending in `_`.
"""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.linear_model import LinearRegression

# X[:, 0] = t_compute_s, X[:, 1] = t_memory_s, X[:, 2] = sequences; the rest: log key (+ alignment)
NUM_ROOFLINE_FEATURES = 3


def base_features(X: np.ndarray) -> np.ndarray:
    """(n, 5) design of the base: [1, max(t_c, t_m), t_c, t_m, n_seq] (seconds, and a count)."""
    t_c, t_m, seqs = X[:, 0], X[:, 1], X[:, 2]
    return np.column_stack((np.ones_like(t_c), np.maximum(t_c, t_m), t_c, t_m, seqs))


class RooflineResidualRegressor(RegressorMixin, BaseEstimator):
    """Per-op time model: roofline base × tree correction (see the module docstring).

    Args:
        n_estimators, max_depth, learning_rate, min_samples_leaf: of the residual
            `GradientBoostingRegressor`: a small, slow-learning ensemble with leaves of at least 8
            shapes, since profiles hold tens of shapes per op and each carries timing noise
            (chosen on held-out shapes of a CPU profile: mean MAPE 9.2 % → 7.5 % against 2-shape
            leaves).
        residual: False fits the base alone (ablation, and a profile with too few rows).
        random_state: seeds the ensemble.

    Attributes (after `fit`):
        base_coef_: (5,) non-negative weights of [1, max, t_c, t_m, n_seq] (s, s/s, s/s, s/s, s).
        residual_: the fitted `GradientBoostingRegressor`, or None.
        key_range_: (2, n_key) the min and max of each log-key feature seen in fit.
    """

    def __init__(self, n_estimators: int = 50, max_depth: int = 2, learning_rate: float = 0.1,
                 min_samples_leaf: int = 8, residual: bool = True, random_state: int = 0):
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.min_samples_leaf = min_samples_leaf
        self.residual = residual
        self.random_state = random_state

    def fit(self, X: np.ndarray, y: np.ndarray) -> "RooflineResidualRegressor":
        """Fit on X (n, 3 + n_key): [t_compute_s, t_memory_s, n_seq, log key...] and y (n,) seconds > 0.

        Raises:
            ValueError: y has a value ≤ 0, or X has fewer than 3 columns or rows.
        """
        X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] <= NUM_ROOFLINE_FEATURES or len(X) < 3 or len(X) != len(y):
            raise ValueError(f"X must be (n >= 3, >= 4) aligned with y; got {X.shape}, {y.shape}")
        if (y <= 0).any():
            raise ValueError("y (seconds) must be > 0")
        design = base_features(X)
        linear = LinearRegression(positive=True, fit_intercept=False).fit(design, y, sample_weight=y**-2.0)
        self.base_coef_ = linear.coef_.copy()
        keys = X[:, NUM_ROOFLINE_FEATURES:]
        self.key_range_ = np.stack((keys.min(axis=0), keys.max(axis=0)))
        self.residual_ = None
        if self.residual and len(X) >= 2 * self.min_samples_leaf + 1:
            target = np.log(y / np.maximum(self.base(X), 1e-12))
            self.residual_ = GradientBoostingRegressor(
                n_estimators=self.n_estimators, max_depth=self.max_depth, learning_rate=self.learning_rate,
                min_samples_leaf=self.min_samples_leaf, random_state=self.random_state).fit(keys, target)
        return self

    def base(self, X: np.ndarray) -> np.ndarray:
        """The roofline base, seconds, (n,); floored at 1 ns so its log exists."""
        X = np.asarray(X, dtype=np.float64)
        return np.maximum(base_features(X) @ self.base_coef_, 1e-9)

    def correction(self, log_keys: np.ndarray) -> np.ndarray:
        """exp(r(log key)), the multiplicative correction, (n,); 1 without a residual."""
        log_keys = np.asarray(log_keys, dtype=np.float64)
        if self.residual_ is None:
            return np.ones(len(log_keys))
        return np.exp(self.residual_.predict(log_keys))

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Seconds per call, (n,), for X as in `fit`."""
        X = np.asarray(X, dtype=np.float64)
        return self.base(X) * self.correction(X[:, NUM_ROOFLINE_FEATURES:])
