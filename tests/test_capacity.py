"""Capacity search, confidence intervals, default SLOs and vLLM flags."""
from __future__ import annotations

import math

import pytest

from experiments.capacity import confidence_interval, default_slo, find_capacity
from experiments.config import SweepConfig
from experiments.vllm_flags import vllm_serve_flags


@pytest.mark.parametrize("true_capacity", [0.7, 7.3, 41.0])
def test_bisection_finds_a_known_capacity_within_its_precision(true_capacity):
    result = find_capacity(lambda qps: qps <= true_capacity, 0.5, 64.0, precision=0.025)
    assert result.capacity_qps <= true_capacity
    assert result.capacity_qps >= true_capacity * (1 - 0.025)
    assert len(result.trials) <= 20


def test_capacity_is_nan_when_even_the_lowest_load_fails_and_capped_at_the_top():
    assert math.isnan(find_capacity(lambda q: False, 0.5, 64.0).capacity_qps)
    assert find_capacity(lambda q: True, 0.5, 64.0, max_qps=64.0).capacity_qps == 64.0


def test_confidence_interval():
    mean, low, high = confidence_interval([10.0, 11.0, 12.0])
    # t(0.975, 2) = 4.303; sd = 1; half width = 4.303 / sqrt(3) = 2.484
    assert mean == 11.0 and low == pytest.approx(11 - 2.484, abs=1e-3) and high == pytest.approx(13.484, abs=1e-3)
    assert math.isnan(confidence_interval([5.0])[1])


def test_default_slos_follow_sarathi_serve_by_model_size():
    assert default_slo(8.03e9) == {"tbt_p99_s": 0.1, "scheduling_delay_p50_s": 2.0}
    assert default_slo(34e9)["tbt_p99_s"] == 0.2
    assert default_slo(69e9)["tbt_p99_s"] == 1.0


def test_vllm_flags_for_a_point():
    point = SweepConfig.model_validate({
        "trace": {"kind": "poisson", "qps": 1},
        "engine": {"scheduler": "sarathi", "chunk_size": 512, "max_num_seqs": 256 // 2, "split_n": 4,
                   "tensor_parallel_size": 2}})
    assert vllm_serve_flags(point) == (
        "--enable-chunked-prefill --max-num-batched-tokens 512 --max-num-seqs 128 --block-size 16 "
        "--gpu-memory-utilization 0.9 --tensor-parallel-size 2 "
        "--speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 4}'")
    vllm = SweepConfig.model_validate({"trace": {"kind": "poisson", "qps": 1}, "engine": {"scheduler": "vllm"}})
    assert vllm_serve_flags(vllm).startswith("--no-enable-chunked-prefill --max-num-seqs 128")
