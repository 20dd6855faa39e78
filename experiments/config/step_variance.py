"""The `step_variance:` block: seeded step-time variance (simulator/step_variance.py)."""
from __future__ import annotations

from typing import Annotated

from pydantic import Field

from experiments.config.base import _Strict
from simulator.step_variance import MAX_CV


class StepVarianceConfig(_Strict):
    """Seeded step-time variance (`simulator/step_variance.py`): each step's priced time times an
    independent lognormal factor of mean 1 and coefficient of variation `cv`, drawn from
    `engine.seed` (a capacity search's repetition k from its seed + k). 0 (the default): priced
    times, as before. A run with variance goes step by step (slower); not with `cluster:` or
    `engine.pipeline_parallel_size` > 1. Out of range or not a finite number: a config error naming
    the file and key."""

    cv: Annotated[float, Field(ge=0, le=MAX_CV, allow_inf_nan=False)] = 0.0  # 0: off; e.g. 0.3 = 30 % per step
