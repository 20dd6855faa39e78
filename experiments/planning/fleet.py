"""Fleet sizing from a capacity search: copies of a point's deployment for a target load, never too few.

Sizing from the mean capacity under-provisions half the time (issue 29: 26.9 QPS a GPU sized 50 QPS
at 2 GPUs where ≈ 23 QPS sustained needs 3). The rule here, printed with the fleet:

    copies = ⌈ target_qps × (1 + headroom) / capacity_low ⌉

where `capacity_low` is the lower end of the capacity's 95 % interval over seeds (one seed: its
capacity, which has no interval, and the report says so), and `headroom` is `fleet.headroom`
(default 0.1: 10 % of burst headroom above the target). GPUs = copies × the point's GPUs
(`experiments.deployment.cluster_gpus`). Copies behind a router are assumed to add capacity
linearly (no cross-copy contention). When the interval's lower end is 0 (few seeds, wide spread)
no fleet is sized; the report says why instead of printing an infinite one.

Prices: `fleet.gpu_hour_usd` is one price for every GPU or a price per device name
(`{h200: 3.7, a100-80gb: 1.8}`); a cluster's pools are priced each on its own device.
"""
from __future__ import annotations

import math

import numpy as np

from experiments.config import SweepConfig, pool_gpus, pool_points
from experiments.deployment import cluster_gpus
from experiments.point import device_name

DEFAULT_HEADROOM = 0.1


def fleet_rule_text(target_qps: float, headroom: float) -> str:
    """The sizing rule as the report prints it."""
    return (f"copies = ⌈{target_qps:g} QPS × (1 + {headroom:g} headroom) / the capacity's 95 % lower bound⌉ "
            "(one seed: its capacity), GPUs = copies × the point's GPUs")


def gpu_hour_usd(prices, device: str) -> float | None:
    """The price of one GPU-hour of `device`: `prices` itself when one number, else its entry for
    `device`; None when no prices are set.

    Raises:
        ValueError: a price table without `device`, naming the key and the devices priced."""
    if prices is None or isinstance(prices, (int, float)):
        return prices
    if device not in prices:
        raise ValueError(f"fleet.gpu_hour_usd has no price for device {device!r} (priced: "
                         f"{', '.join(sorted(prices))}); add it, e.g. fleet.gpu_hour_usd: {{{device}: 2.5}}")
    return float(prices[device])


def copy_usd_per_hour(point: SweepConfig, prices) -> float | None:
    """USD per hour of one copy of the point's deployment: its GPUs at their device's price, each
    pool of a `cluster:` point at its own; None without prices."""
    if prices is None:
        return None
    if point.cluster is None:
        return cluster_gpus(point) * gpu_hour_usd(prices, device_name(point))
    pools = pool_points(point)
    return sum(gpus * gpu_hour_usd(prices, device_name(pools[name])) for name, gpus in pool_gpus(point, pools).items())


def sizing_capacity(capacity: dict) -> float:
    """The capacity a fleet is sized from: `capacity_ci_low` (the 95 % lower bound) where the row
    has an interval, else `capacity_qps` (one seed); NaN when none is usable."""
    low = capacity.get("capacity_ci_low", math.nan)
    if low is not None and not math.isnan(low):
        return float(low)
    value = capacity.get("capacity_qps", math.nan)
    return math.nan if value is None else float(value)


def fleet_row(point: SweepConfig, capacity: dict, trials: list[dict]) -> dict:
    """The fleet columns of a capacity row (`capacity`: its `capacity_qps`, `capacity_ci_low`):
    `fleet_sizing_qps` (`sizing_capacity`), `fleet_replicas` (copies, by the module's rule),
    `fleet_gpus`, `fleet_usd_per_hour` and `usd_per_million_output_tokens` at the target's output
    tokens (the passing trials' output tokens per request) where prices are set; `fleet_problem`
    instead of copies when no capacity is usable. {} without `fleet:` or without any capacity."""
    fleet = point.fleet
    if fleet is None or not capacity.get("capacity_qps", 0) > 0:
        return {}
    sizing = sizing_capacity(capacity)
    if not sizing > 0:
        return {"fleet_sizing_qps": sizing,
                "fleet_problem": "the capacity's 95 % lower bound is 0 (the seeds spread too widely): no fleet is "
                                 "sized from it; more seeds (search.seeds) narrow the interval"}
    replicas = math.ceil(fleet.target_qps * (1 + fleet.headroom) / sizing)
    row = {"fleet_sizing_qps": sizing, "fleet_replicas": replicas, "fleet_gpus": replicas * cluster_gpus(point)}
    per_copy = copy_usd_per_hour(point, fleet.gpu_hour_usd)
    passing = [t for t in trials if t["passed"] and t["throughput_rps"] > 0]
    if per_copy is not None:
        row["fleet_usd_per_hour"] = replicas * per_copy
        if passing:
            tokens_per_request = float(np.mean([t["output_throughput_tps"] / t["throughput_rps"] for t in passing]))
            tokens_per_hour = fleet.target_qps * tokens_per_request * 3600
            row["usd_per_million_output_tokens"] = row["fleet_usd_per_hour"] / tokens_per_hour * 1e6
    return row
