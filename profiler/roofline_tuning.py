"""Tune the roofline's efficiency terms on measured op times.

The roofline of one op call (`roofline.py`, Williams et al. CACM 2009) with a launch latency:

    t = max(t_c / flops_efficiency, t_m / bandwidth_efficiency) + kernel_latency_s

where t_c = FLOPs / peak FLOP/s and t_m = bytes / bandwidth at the device's datasheet (or
measured) rates. GEMMs and attention share one bandwidth efficiency; element-wise ops (norms,
rotary, activation, adds, cache writes, sampling) get their own, since they stream through
several passes and reach a smaller fraction of the bandwidth than a GEMM's weight read. The four
terms are fitted by least squares on log(predicted / measured) (scipy `least_squares`, which
scikit-learn already depends on), so every op counts by its relative error.

Used two ways: the fitted cost model prices ops a profile lacks with the roofline tuned on the ops
it has; and the roofline's transfer across devices is checked by tuning on one GPU's rows and
predicting another's.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profiler.roofline import BANDWIDTH_EFFICIENCY, FLOPS_EFFICIENCY

ELEMENTWISE_FAMILIES = ("elementwise",)


@dataclass(frozen=True)
class RooflineEfficiency:
    """The roofline's tunable terms (fractions of the peaks, and seconds).

    Defaults are the untuned assumptions of `roofline.py` (60 % of peak FLOP/s, 80 % of
    bandwidth, no launch latency).
    """

    flops_efficiency: float = FLOPS_EFFICIENCY
    bandwidth_efficiency: float = BANDWIDTH_EFFICIENCY
    elementwise_bandwidth_efficiency: float = BANDWIDTH_EFFICIENCY
    kernel_latency_s: float = 0.0

    def op_time_s(self, family: str | np.ndarray, t_compute_s: np.ndarray, t_memory_s: np.ndarray) -> np.ndarray:
        """Seconds per call, (n,): the roofline bound at these efficiencies plus the latency.

        Args:
            family: the op family (one string, or an array of them, one per row).
            t_compute_s, t_memory_s: FLOPs / peak FLOP/s and bytes / bandwidth, (n,).
        """
        if isinstance(family, str):
            elementwise = family in ELEMENTWISE_FAMILIES
        else:
            elementwise = np.isin(np.asarray(family), ELEMENTWISE_FAMILIES)
        bandwidth = np.where(elementwise, self.elementwise_bandwidth_efficiency, self.bandwidth_efficiency)
        return (np.maximum(np.asarray(t_compute_s) / self.flops_efficiency, np.asarray(t_memory_s) / bandwidth)
                + self.kernel_latency_s)


def tune_roofline(family: np.ndarray, t_compute_s: np.ndarray, t_memory_s: np.ndarray,
                  time_s: np.ndarray) -> RooflineEfficiency:
    """The efficiencies (in [0.01, 1]) and latency (in [0, 1 ms]) that minimise the squared log
    error of `RooflineEfficiency.op_time_s` against measured `time_s` (seconds, > 0), all (n,).

    Raises:
        ValueError: the arrays differ in length, are empty, or a time is not > 0.
    """
    from scipy.optimize import least_squares

    family, t_c, t_m, y = (np.asarray(a) for a in (family, t_compute_s, t_memory_s, time_s))
    if not len(y) or not len(family) == len(t_c) == len(t_m) == len(y) or (y <= 0).any():
        raise ValueError("tune_roofline needs aligned, non-empty arrays and times > 0")

    def log_error(params: np.ndarray) -> np.ndarray:
        return np.log(RooflineEfficiency(*params).op_time_s(family, t_c, t_m) / y)

    start = np.array([FLOPS_EFFICIENCY, BANDWIDTH_EFFICIENCY, BANDWIDTH_EFFICIENCY, 1e-6])
    result = least_squares(log_error, start, bounds=([0.01, 0.01, 0.01, 0.0], [1.0, 1.0, 1.0, 1e-3]),
                           x_scale=[0.1, 0.1, 0.1, 1e-6])
    return RooflineEfficiency(*(float(v) for v in result.x))
