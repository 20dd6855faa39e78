"""A capacity search's trials share one cost model (experiments/planning/trial_reuse.py)."""
from __future__ import annotations

import pandas as pd

import experiments.planning.search as search_module
from experiments.config import SweepConfig
from experiments.planning.search import search_capacity, trial_config
from experiments.planning.trial_reuse import shared_cost_model

# chunk 4096 prices steps off the measured H100 grids, so the per-trial counters are non-zero
POINT = {"name": "reuse", "model": "llama-3-8b", "device": "h100-sxm", "cost_model": "auto",
         "trace": {"kind": "profile", "name": "azure-conv", "qps": 8, "num_requests": 200, "seed": 0},
         "engine": {"scheduler": "sarathi", "chunk_size": 4096, "max_num_seqs": 128},
         "slo": {"tbt_p99_s": 0.1, "scheduling_delay_p50_s": 2.0},
         "search": {"qps": [2, 40], "num_requests": 300, "precision": 0.1, "seeds": 1, "max_trial_scale": 1}}


def test_one_model_for_every_trial_of_a_deployment_with_its_counters_zeroed():
    point = SweepConfig.model_validate(POINT)
    shared = shared_cost_model()
    first = shared(trial_config(point, 10.0, 0, 200))
    first.num_predictions, first.out_of_grid_steps = 7, 3
    first.out_of_range["attention"] += 3
    again = shared(trial_config(point, 20.0, 1, 400))  # another rate, size and repetition: the same model
    assert again is first and (again.num_predictions, again.out_of_grid_steps, dict(again.out_of_range)) == (0, 0, {})
    other = point.model_copy(update={"engine": point.engine.model_copy(update={"chunk_size": 512})})
    assert shared(trial_config(other, 10.0, 0, 200)) is None  # another deployment builds its own


def test_a_search_with_the_shared_model_gives_the_rows_of_one_built_per_trial(monkeypatch):
    """Every trial row equal, the off-grid step counts (each trial's own) included."""
    point = SweepConfig.model_validate(POINT)
    shared = search_capacity(point, 0, 0)
    monkeypatch.setattr(search_module, "shared_cost_model", lambda: (lambda config: None))
    fresh = search_capacity(point, 0, 0)
    assert shared[0] == fresh[0]
    assert pd.DataFrame(shared[1]).equals(pd.DataFrame(fresh[1]))
    assert pd.DataFrame(shared[1])["cost_model_steps_out_of_range"].gt(0).any()
