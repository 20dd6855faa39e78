"""What a capacity search's trials share: one cost model per search, not one per trial.

A search runs one point at many rates and lengths (`experiments.planning.search.search_capacity`);
between its trials only the trace changes (rate, size, and a repetition's trace and engine
seeds), so the cost model its first trial builds (`experiments.point.build_cost_model`: the
measured tables read, the roofline efficiencies fitted, ~16 ms for llama-3-8b on an H100) can
price every later one, its per-count caches (`profiler.measured.cost_model`) warm. Its step
counters (its public `num_predictions`, `out_of_grid_steps` and `out_of_range`) are zeroed
before each trial, so each trial's `cost_model_steps_out_of_range` is its own, as when it built
its own model. Only a `MeasuredCostModel` is shared (`cost_model: auto` on a device with
tables); others, and a `cluster:` point's pools, are built per trial as before.
"""
from __future__ import annotations

from typing import Callable

from experiments.config import SweepConfig
from experiments.point import build_cost_model


def shared_cost_model() -> Callable[[SweepConfig], object | None]:
    """A function of a trial's config that gives one search's shared cost model, its counters
    zeroed: built by the first trial, given again to each later trial whose config equals the
    first's but for the trace and the engine's seed (no cost model reads either). None (the trial
    builds its own) for a `cluster:` point, a model other than `MeasuredCostModel`, or a trial of
    another deployment.

    Raises:
        `build_cost_model`'s errors (a profile of another model, ...), from the first trial.
    """
    built: dict = {}

    def for_trial(trial: SweepConfig):
        if trial.cluster is not None:
            return None
        key = trial.model_dump_json(exclude={"trace": True, "engine": {"seed"}})
        from profiler.measured.cost_model import MeasuredCostModel  # built only with measured tables: imported then

        if not built:
            built["key"], built["model"] = key, build_cost_model(trial)
        model = built["model"]
        if key != built["key"] or not isinstance(model, MeasuredCostModel):
            return None
        model.num_predictions = model.out_of_grid_steps = 0
        model.out_of_range.clear()
        return model

    return for_trial
