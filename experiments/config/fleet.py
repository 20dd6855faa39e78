"""`fleet:`: fleet sizing and cost from a capacity search (`search:` is required beside it)."""
from __future__ import annotations

from pydantic import Field

from experiments.config.base import _Strict


class FleetConfig(_Strict):
    """Fleet sizing from a capacity search: replicas of each point needed for `target_qps`, and
    the cost per million output tokens at `gpu_hour_usd` per GPU-hour."""

    target_qps: float = Field(gt=0)
    gpu_hour_usd: float | None = Field(default=None, gt=0)
