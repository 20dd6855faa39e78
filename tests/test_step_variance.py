"""Step-time variance (simulator/step_variance.py): the factors, a run's step times, the fit of cv
from per-request TPOT, the `step_variance:` config block and its bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from simulator.scheduler import SchedulerConfig, make_scheduler
from simulator.simulate import simulate
from simulator.step_variance import StepVariance, fit_cv_from_tpot
from tests.conftest import ConstantCostModel
from traces import Request


def _config(**kw):
    return SchedulerConfig(max_model_len=8192, block_size=16, chunk_size=512, num_gpu_blocks=4096, **kw)


def test_factors_have_mean_one_and_the_cv_asked_for():
    stream = StepVariance(0.3, seed=7).factors(0)
    draws = np.array([stream.next() for _ in range(100_000)])
    assert draws.min() > 0
    assert draws.mean() == pytest.approx(1.0, abs=0.005)  # sd of the mean 0.3 / sqrt(1e5) ≈ 0.001
    assert draws.std() == pytest.approx(0.3, abs=0.01)
    again = StepVariance(0.3, seed=7).factors(0)
    assert [again.next() for _ in range(5)] == draws[:5].tolist()  # same seed, same factors
    other = StepVariance(0.3, seed=7).factors(1)
    assert [other.next() for _ in range(5)] != draws[:5].tolist()  # each replica its own stream


def test_each_step_takes_its_priced_time_times_its_factor():
    # Two requests one after the other, 10 ms priced steps: the step table's durations are
    # 10 ms × the replica's factors in step order, and the tokens follow them.
    requests = [Request(0, 0.0, 100, 5), Request(1, 0.0, 100, 5)]
    variance = StepVariance(0.2, seed=3)
    result = simulate(requests, make_scheduler("vllm_v1", _config()), ConstantCostModel(0.01),
                      step_variance=variance)
    stream = variance.factors(0)
    expected = [0.01 * stream.next() for _ in range(len(result.steps))]
    assert result.steps["duration_s"].tolist() == expected
    ends = np.cumsum(expected)
    assert result.requests.set_index("request_id").loc[1, "completion_s"] == pytest.approx(ends[-1])
    plain = simulate(requests, make_scheduler("vllm_v1", _config()), ConstantCostModel(0.01))
    assert len(plain.steps) == len(result.steps) and set(plain.steps["duration_s"]) == {0.01}


def test_same_seed_same_run_other_seed_other_run():
    requests = [Request(i, 0.003 * i, 50 + i, 20) for i in range(30)]

    def run(seed):
        return simulate(requests, make_scheduler("vllm_v1", _config()), ConstantCostModel(0.01),
                        step_variance=StepVariance(0.3, seed), async_scheduling=True).requests["ttft_s"].tolist()

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_fit_recovers_the_cv_of_a_run_with_variance():
    # One request at a time, 200 output tokens each (199 decode steps): the per-request TPOT of a
    # run with cv 0.3 against the priced 10 ms gives cv back within its sampling error (60
    # requests: s² within about ±18 %, so cv within about ±9 %).
    requests = [Request(i, 10.0 * i, 20, 200) for i in range(60)]
    noisy = simulate(requests, make_scheduler("vllm_v1", _config()), ConstantCostModel(0.01),
                     step_variance=StepVariance(0.3, seed=11)).requests
    plain = simulate(requests, make_scheduler("vllm_v1", _config()), ConstantCostModel(0.01)).requests
    cv = fit_cv_from_tpot(noisy["tpot_s"], plain["tpot_s"], noisy["output_tokens"])
    assert cv == pytest.approx(0.3, rel=0.15)


def test_fit_hand_worked():
    # Ten requests of 101 tokens (100 decode steps) with ln TPOT ratios ±0.02 around 0:
    # s² = 0.02² × 100 = 0.04, cv = sqrt(exp(0.04) − 1) = 0.20203.
    ratio = np.exp(np.array([0.02, -0.02] * 5))
    cv = fit_cv_from_tpot(ratio * 0.01, np.full(10, 0.01), np.full(10, 101))
    assert cv == pytest.approx(math.sqrt(math.expm1(0.04)))
    with pytest.raises(ValueError, match="usable requests"):
        fit_cv_from_tpot(ratio * 0.01, np.full(10, 0.01), np.full(10, 2))  # TPOT of 1 decode step: left out


@pytest.mark.parametrize("cv", [0.0, -0.1, 2.5, math.nan, math.inf, True])
def test_out_of_range_cv_is_refused(cv):
    with pytest.raises(ValueError, match="cv"):
        StepVariance(cv)


def test_variance_with_pipeline_parallelism_is_refused():
    from simulator.pricing import StepPricer

    with pytest.raises(ValueError, match="step by step with one pipeline stage"):
        simulate([Request(0, 0.0, 10, 2)], make_scheduler("vllm_v1", _config()),
                 StepPricer(ConstantCostModel(0.01), pipeline_stages=2), step_variance=StepVariance(0.1))


def _write(tmp_path, extra: dict):
    config = {"model": "llama-3-8b", "device": "h100-sxm",
              "trace": {"kind": "synthetic", "num_requests": 8, "qps": 2.0, "prompt_tokens": 64, "output_tokens": 8},
              "engine": {"scheduler": "vllm_v1"}, **extra}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("value", [-0.1, 3.0, ".nan", "lots"])
def test_bad_cv_in_a_config_names_file_and_key(tmp_path, value):
    from experiments.config import ConfigError, load_config

    path = _write(tmp_path, {"step_variance": {"cv": value}})
    with pytest.raises(ConfigError, match=r"c\.yaml.*step_variance\.cv|step_variance\.cv.*c\.yaml"):
        load_config(path)


def test_variance_with_a_pipeline_in_a_config_is_refused(tmp_path):
    from experiments.config import ConfigError, load_config

    path = _write(tmp_path, {"step_variance": {"cv": 0.2}})
    text = yaml.safe_load(path.read_text())
    text["engine"]["pipeline_parallel_size"] = 2
    text["engine"]["async_scheduling"] = False
    path.write_text(yaml.safe_dump(text))
    with pytest.raises(ConfigError, match="step_variance.cv > 0 with engine.pipeline_parallel_size"):
        load_config(path)


def test_a_point_with_variance_runs_seeded_and_says_so(tmp_path):
    from experiments.config import SweepConfig, load_config
    from experiments.point import run_point

    _, points = load_config(_write(tmp_path, {"step_variance": {"cv": 0.25}}))
    row = run_point(SweepConfig.model_validate(points[0])).row
    assert row["step_variance_cv"] == 0.25 and row["step_variance_seed"] == 0
    _, plain = load_config(_write(tmp_path, {}))
    assert "step_variance_cv" not in run_point(SweepConfig.model_validate(plain[0])).row
