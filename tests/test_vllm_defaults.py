"""vLLM 0.19's defaults per card (experiments/vllm_defaults.py), cited to
`EngineArgs.get_batch_defaults` / `_set_default_max_num_seqs_and_batched_tokens_args`
(vllm/engine/arg_utils.py) and `VllmConfig._set_cudagraph_sizes` (vllm/config/vllm.py)."""
from __future__ import annotations

import pytest

from experiments.vllm_defaults import cudagraph_capture_sizes, is_large_card, vllm_defaults
from profiler import get_device_spec


@pytest.mark.parametrize("device, budget, seqs", [
    ("h100-sxm", 8192, 1024),  # 79.19 GiB: "For GPUs like H100 and MI300x, use larger default values"
    ("h200", 8192, 1024),
    ("rtx-pro-6000", 8192, 1024),  # 95.01 GiB, not an A100
    ("mi300x", 8192, 1024),
    ("b200", 8192, 1024),
    ("a100-80gb", 2048, 256),  # >= 70 GiB but an A100 (PR #17885)
    ("a100-40gb", 2048, 256),
    ("l40s", 2048, 256),  # 44.53 GiB
    ("rtx-4090", 2048, 256),
    ("l4", 2048, 256),
])
def test_api_server_defaults_per_card(device, budget, seqs):
    d = vllm_defaults(get_device_spec(device), max_model_len=131072)
    assert (d.max_num_batched_tokens, d.max_num_seqs, d.block_size, d.enable_prefix_caching) == (budget, seqs, 16, True)


def test_a_derived_a100_keeps_the_a100_rule_and_the_name_counts():
    mine = get_device_spec({"name": "lab-gpu", "base": "a100-80gb"})
    assert not is_large_card(mine)
    other = get_device_spec({"name": "my-a100-like", "memory_gib": 80, "dense_bf16_tflops": 312,
                             "memory_bandwidth_gb_per_s": 2039, "gpu_link": {"kind": "nvlink", "gb_per_s_per_direction": 300},
                             "host_link": {"gb_per_s_per_direction": 32}})
    assert not is_large_card(other)  # "a100" in the device's name, as vLLM reads the CUDA device name


def test_clamps_of_unset_keys():
    h100 = get_device_spec("h100-sxm")
    # An unset budget is at most max_num_seqs x max_model_len: 1024 x 4 = 4096.
    assert (vllm_defaults(h100, max_model_len=4).max_num_batched_tokens, vllm_defaults(h100, 4).max_num_seqs) == (4096, 1024)
    # ... with the user's max_num_seqs: 2 x 1000.
    assert vllm_defaults(h100, 1000, max_num_seqs=2).max_num_batched_tokens == 2000
    # An unset max_num_seqs is at most the budget: min(1024, 512).
    assert vllm_defaults(h100, 131072, max_num_batched_tokens=512).max_num_seqs == 512
    # Both given: kept as given.
    d = vllm_defaults(h100, 131072, max_num_batched_tokens=300, max_num_seqs=500)
    assert (d.max_num_batched_tokens, d.max_num_seqs) == (300, 500)


def test_cudagraph_capture_sizes():
    # max_num_seqs 256: min(256 x 2, 512) = 512: 1, 2, 4, 8..248 by 8 (31), 256..512 by 16 (17).
    sizes = cudagraph_capture_sizes(256, 2048)
    assert len(sizes) == 51 and sizes[:5] == (1, 2, 4, 8, 16) and sizes[-2:] == (496, 512)
    assert cudagraph_capture_sizes(128, 2048)[-1] == 256 and len(cudagraph_capture_sizes(128, 2048)) == 35
    assert cudagraph_capture_sizes(1024, 100) == (1, 2, 4, *range(8, 97, 8))  # at most the budget
    assert cudagraph_capture_sizes(64, 8192, num_speculative_tokens=3)[-1] == 512  # 64 x 4 x 2
    assert vllm_defaults(get_device_spec("l40s"), 131072).cudagraph_capture_sizes == sizes


# ----- applied to a config's vllm_v1 engine ------------------------------------------------------

from experiments.config import SweepConfig  # noqa: E402
from experiments.planning.report_header import vllm_defaults_lines  # noqa: E402
from experiments.vllm_defaults import applied_defaults  # noqa: E402

TRACE = {"kind": "synthetic", "qps": 1, "prompt_tokens": 10, "output_tokens": 10, "num_requests": 4}


def _engine(device="h100-sxm", **engine):
    return SweepConfig(trace=TRACE, device=device, engine={"scheduler": "vllm_v1", **engine}).engine


@pytest.mark.parametrize("device, budget, seqs", [("h100-sxm", 8192, 1024), ("a100-80gb", 2048, 256),
                                                  ("rtx-4090", 2048, 256)])
def test_unset_vllm_v1_keys_take_vllms_defaults_for_the_card(device, budget, seqs):
    e = _engine(device)
    assert (e.chunk_size, e.max_num_seqs) == (budget, seqs)
    assert e.model_fields_set == {"scheduler"}  # still unset: labels name only what the user wrote
    assert applied_defaults(e, get_device_spec(device))["chunk_size"] == budget


def test_set_keys_are_kept_and_other_schedulers_keep_their_defaults():
    assert (_engine(chunk_size=512).chunk_size, _engine(chunk_size=512).max_num_seqs) == (512, 512)  # min(1024, 512)
    assert _engine(max_num_seqs=64).chunk_size == 8192
    sarathi = SweepConfig(trace=TRACE, engine={"scheduler": "sarathi"}).engine
    assert (sarathi.chunk_size, sarathi.max_num_seqs) == (512, 128)


def test_max_num_batched_tokens_is_vllm_v1s_token_budget():
    e = _engine(max_num_batched_tokens=4096)
    assert (e.chunk_size, e.max_num_batched_tokens, e.max_num_seqs) == (4096, None, 1024)
    assert "max_num_batched_tokens" not in e.used_settings() and e.used_settings()["chunk_size"] == 4096
    with pytest.raises(ValueError, match=r"engine.max_num_batched_tokens \(4096\) and engine.chunk_size \(2048\) "
                                         r"are one setting for scheduler vllm_v1"):
        _engine(max_num_batched_tokens=4096, chunk_size=2048)


def test_a_max_num_seqs_above_the_default_budget_says_which_default():
    with pytest.raises(ValueError, match=r"max_num_seqs \(4000\) must be <= chunk_size \(2048\).*vLLM's default "
                                         r"chunk_size 2048 for l40s: 44.53 GiB < 70 GiB\); set engine.chunk_size too"):
        _engine("l40s", max_num_seqs=4000)


def test_a_cluster_pool_takes_its_own_cards_defaults():
    from experiments.config import pool_points
    point = SweepConfig(trace=TRACE, device="h100-sxm", engine={"scheduler": "vllm_v1"},
                        cluster={"prefill": {"device": "a100-80gb"}})
    pools = pool_points(point)
    assert (pools["prefill"].engine.chunk_size, pools["decode"].engine.chunk_size) == (2048, 8192)


def test_the_report_lists_the_defaults_applied():
    base = SweepConfig(trace=TRACE, device="a100-80gb", engine={"scheduler": "vllm_v1"})
    assert vllm_defaults_lines(base) == [
        "vLLM 0.19 defaults applied to unset engine keys: chunk_size 2048 (vLLM's --max-num-batched-tokens), "
        "max_num_seqs 256 (vLLM's --max-num-seqs), for a100-80gb: an A100 (EngineArgs.get_batch_defaults, OpenAI API "
        "server); a point on another card takes that card's (its chunk_size and max_num_seqs columns)."]
    assert vllm_defaults_lines(SweepConfig(trace=TRACE, engine={"scheduler": "vllm_v1", "chunk_size": 256,
                                                                "max_num_seqs": 64})) == []
