"""One scheduler, two clocks: priced by the same cost model, the engine makes the simulator's plans.

With a `PricedClock` the engine's steps take what the simulator's pricer says, so the shared
scheduler sees the same times and must produce the same plans, block usage and preemptions step
by step, while the engine really executes them on the tiny model (its KV writes must stay inside
the scheduler's block tables, or `prepare_inputs` raises). Requests and steps come out in the
simulator's schema, column for column.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from gpu_engine.build import build_engine, build_model  # noqa: E402
from gpu_engine.checkpoint import load_model_args  # noqa: E402
from gpu_engine.clock import PricedClock  # noqa: E402
from gpu_engine.driver import run_trace  # noqa: E402
from gpu_engine.records import read_plans  # noqa: E402
from gpu_engine.runner import cpu_threads  # noqa: E402
from profiler import RooflineCostModel, get_device_spec, get_model_spec  # noqa: E402
from simulator.acceptance import PositionalAcceptance, speculative_outcome_fn  # noqa: E402
from simulator.pricing import StepPricer  # noqa: E402
from simulator.scheduler import SCHEDULERS, SchedulerConfig, make_scheduler  # noqa: E402
from simulator.simulate import simulate  # noqa: E402
from traces import Request  # noqa: E402

TINY = Path(__file__).parent / "data" / "engine" / "tiny"
# Times as llama-3-8b on an H100 would take them (roofline): they depend on each plan's shape.
COST = RooflineCostModel(get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"))
PRICER = StepPricer(COST, swap_s_per_token=2e-6)
TIME_COLUMNS = ["start_s", "duration_s"]


@pytest.fixture(scope="module")
def model():
    with cpu_threads(1):  # tiny matmuls: more threads only contend
        yield build_model(load_model_args(TINY), dtype=torch.float32, device="cpu", seed=0)


def trace(num_requests: int = 14, seed: int = 3) -> list[Request]:
    """Bursty arrivals (~every 4 ms) of 5..40-token prompts with 2..14 output tokens."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(0.004, num_requests))
    return [Request(i, float(t), int(rng.integers(5, 41)), int(rng.integers(2, 15))) for i, t in enumerate(arrivals)]


def both(model, scheduler_name: str, config: SchedulerConfig, acceptance_seed: int | None = None):
    requests = trace()
    forced = PositionalAcceptance(0.6, seed=acceptance_seed) if acceptance_seed is not None else None
    engine = build_engine(model, scheduler_name, config, forced_acceptance=forced)
    run = run_trace(engine, requests, clock=PricedClock(PRICER))
    outcome_fn = speculative_outcome_fn(PositionalAcceptance(0.6, seed=acceptance_seed)) if forced else None
    sim = simulate(requests, make_scheduler(scheduler_name, config), PRICER, outcome_fn=outcome_fn)
    return run, sim


def assert_same_records(run, sim):
    assert list(run.steps.columns) == list(sim.steps.columns)
    assert list(run.requests.columns) == list(sim.requests.columns)
    exact = [c for c in sim.steps.columns if c not in TIME_COLUMNS]
    pd.testing.assert_frame_equal(run.steps[exact], sim.steps[exact])
    np.testing.assert_allclose(run.steps[TIME_COLUMNS], sim.steps[TIME_COLUMNS], rtol=1e-12)
    counts = ["request_id", "finish_reason", "generated_tokens", "num_preemptions", "recomputed_tokens"]
    pd.testing.assert_frame_equal(run.requests[counts], sim.requests[counts])
    for got, expected in zip(run.requests["token_times_s"], sim.requests["token_times_s"]):
        np.testing.assert_allclose(got, expected, rtol=1e-12)


@pytest.mark.parametrize("scheduler_name,config", [
    ("sarathi", SchedulerConfig(num_gpu_blocks=24, block_size=4, max_model_len=256, max_num_seqs=8, chunk_size=16)),
    ("vllm", SchedulerConfig(num_gpu_blocks=24, block_size=4, max_model_len=256, max_num_seqs=8,
                             preemption="swap")),
])
def test_engine_block_usage_and_plans_match_the_simulator_step_by_step(model, scheduler_name, config):
    run, sim = both(model, scheduler_name, config)
    assert run.summary["num_preemptions"] > 0  # the 24-block pool is tight for this burst
    assert run.steps["kv_blocks_used"].max() > 0.9 * config.num_gpu_blocks
    assert_same_records(run, sim)
    assert (run.requests["finish_reason"] == "completed").all()
    assert {rid: len(ids) for rid, ids in run.outputs.items()} == {r.request_id: r.output_tokens for r in trace()}


def test_forced_acceptance_reproduces_the_simulators_split_n_run(model):
    config = SchedulerConfig(num_gpu_blocks=60, block_size=4, max_model_len=256, max_num_seqs=8, chunk_size=24,
                             split_n=3)
    run, sim = both(model, "sarathi", config, acceptance_seed=11)
    assert run.steps["num_draft_tokens"].sum() > 0
    assert_same_records(run, sim)
    drafts = run.drafts
    assert (drafts["drafts_proposed"] == drafts["drafts_granted"]).all()  # forced: every granted draft verified
    assert 0 < drafts["drafts_accepted"].sum() < drafts["drafts_proposed"].sum()


def test_plan_log_round_trips_to_the_executed_plans(model, tmp_path):
    config = SchedulerConfig(num_gpu_blocks=40, block_size=4, max_model_len=256, max_num_seqs=8, chunk_size=16)
    run, _ = both(model, "sarathi", config)
    paths = run.write(tmp_path)
    assert sorted(p.name for p in paths) == ["drafts.parquet", "outputs.jsonl", "plans.jsonl", "requests.parquet",
                                             "steps.parquet", "summary.json"]
    plans = read_plans(tmp_path / "plans.jsonl")
    assert len(plans) == len(run.steps)
    assert [p.kv_blocks_used for p in plans] == run.steps["kv_blocks_used"].tolist()
    assert [p.num_prefill_tokens for p in plans] == run.steps["num_prefill_tokens"].tolist()
    # Re-pricing the executed plans gives the recorded step times (they were priced by COST).
    np.testing.assert_allclose([PRICER.step_s(p) for p in plans], run.steps["duration_s"], rtol=1e-12)
    first = plans[0].sequences[0]
    assert first.num_context_tokens == 0 and first.is_prefill and len(first.block_table) > 0
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    assert requests["generated_tokens"].tolist() == run.requests["generated_tokens"].tolist()


@pytest.mark.parametrize("scheduler_name", sorted(SCHEDULERS))
def test_every_scheduler_runs_on_the_engine_as_in_the_simulator(model, scheduler_name):
    chunked = SCHEDULERS[scheduler_name].chunked
    config = SchedulerConfig(num_gpu_blocks=48, block_size=4, max_model_len=64, max_num_seqs=8,
                             chunk_size=24 if chunked else None, split_n=2)
    run, sim = both(model, scheduler_name, config, acceptance_seed=5)
    assert (run.requests["finish_reason"] == "completed").all()
    assert_same_records(run, sim)


def test_prefix_cached_vllm_v1_runs_the_same_on_the_engine_as_in_the_simulator(model):
    # Every other request opens with one of two shared 12-token prefixes (3 blocks of 4); the
    # 28-block pool is tight, so requests are preempted and resume on their cached blocks.
    from dataclasses import replace
    requests = [replace(r, prompt_tokens=r.prompt_tokens + 12, prefix_hash_ids=(10 * (i % 4), 10 * (i % 4) + 1,
                                                                                 10 * (i % 4) + 2),
                        prefix_block_tokens=4) if i % 2 == 0 else r for i, r in enumerate(trace())]
    config = SchedulerConfig(num_gpu_blocks=28, block_size=4, max_model_len=256, max_num_seqs=8, chunk_size=16)
    run = run_trace(build_engine(model, "vllm_v1", config), requests, clock=PricedClock(PRICER))
    sim = simulate(requests, make_scheduler("vllm_v1", config), PRICER)
    assert_same_records(run, sim)
    assert run.summary["num_preemptions"] > 0 and run.summary["prefix_cache_hits_tokens"] > 0
    assert run.summary["preempted_cache_hits_tokens"] > 0
    pd.testing.assert_frame_equal(run.requests[["cached_tokens", "resumed_cached_tokens"]],
                                  sim.requests[["cached_tokens", "resumed_cached_tokens"]])
