"""`fleet:`: fleet sizing and cost from a capacity search (`search:` is required beside it)."""
from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from experiments.config.base import _Strict

_Price = Annotated[float, Field(gt=0)]


class FleetConfig(_Strict):
    """Fleet sizing from a capacity search (experiments/planning/fleet.py): copies of each point
    for `target_qps` × (1 + `headroom`) at the capacity's 95 % lower bound, and their cost at
    `gpu_hour_usd`: one price per GPU-hour, or a price per device name, e.g.
    `{h200: 3.7, a100-80gb: 1.8}` (every device the points run on must have one)."""

    target_qps: float = Field(gt=0)
    gpu_hour_usd: _Price | dict[str, _Price] | None = None
    headroom: float = Field(default=0.1, ge=0, le=10)  # burst headroom above the target, as a fraction of it

    @field_validator("gpu_hour_usd", mode="before")
    @classmethod
    def _prices(cls, value):
        # One message naming both forms, instead of pydantic's one per member of the union.
        prices = value.values() if isinstance(value, dict) else [value]
        if value is not None and not all(isinstance(p, (int, float)) and not isinstance(p, bool)
                                         and 0 < p < float("inf") for p in prices):
            raise ValueError("must be a finite price > 0 in USD per GPU-hour, or a price per device name, e.g. "
                             "{h200: 3.7, a100-80gb: 1.8}")
        return value


def price_problem(point) -> str | None:
    """Why `fleet.gpu_hour_usd`, a price per device, cannot price `point` (a device it runs on,
    a `cluster:` pool's included, has no price), naming the key; None when it can."""
    from profiler import get_device_spec  # the device's name, as the points table gives it

    prices = point.fleet.gpu_hour_usd if point.fleet is not None else None
    if not isinstance(prices, dict):
        return None
    devices = [point.device]
    if point.cluster is not None:
        devices += [getattr(point.cluster, pool).device for pool in ("prefill", "decode")]
    for device in devices:
        name = get_device_spec(device).name if device is not None else None
        if name is not None and name not in prices:
            return (f"fleet.gpu_hour_usd has no price for device {name!r} (priced: {', '.join(sorted(prices))}); "
                    f"add it, e.g. {{{name}: 2.5}}, or give one price for every GPU")
    return None
