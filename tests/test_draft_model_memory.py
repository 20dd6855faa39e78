"""A draft model's weights share the target's GPUs (split-N with `draft: {model}`): vLLM loads the
drafter before it profiles memory, so its weights leave the KV pool, and a draft that cannot fit
beside the target is refused naming both (experiments.deployment.draft_weight_bytes)."""
from __future__ import annotations

import pytest

from experiments.config import SweepConfig
from experiments.deployment import build_scheduler_config, draft_weight_bytes


def point(**engine) -> SweepConfig:
    return SweepConfig.model_validate({
        "model": "llama-3-8b", "device": engine.pop("device", "h100-sxm"), "cost_model": "roofline",
        "trace": {"kind": "synthetic", "num_requests": 10, "qps": 1, "prompt_tokens": 128, "output_tokens": 8},
        "engine": {"scheduler": "vllm_v1", "chunk_size": 512, "max_num_seqs": 64, **engine}})


def test_the_draft_weights_leave_the_kv_pool():
    # llama-3-8b as its own draft: 8,030,261,248 parameters x 2 B = 16,060,522,496 B, plus the rotary
    # cos/sin cache 8,192 positions x 128 x 2 B = 2,097,152 B: 16,062,619,648 B. A KV block of 16
    # tokens is 16 x 32 layers x 2 (K, V) x 8 heads x 128 x 2 B = 2,097,152 B, so the pool loses
    # 16,062,619,648 / 2,097,152 = 7,659.25 blocks: 7,659 or 7,660 by where the remainder falls.
    assert draft_weight_bytes(point()) == 0
    assert draft_weight_bytes(point(split_n=2, draft="ngram")) == 0
    with_draft = point(split_n=2, draft={"model": "llama-3-8b"})
    assert draft_weight_bytes(with_draft) == 16_062_619_648
    lost = build_scheduler_config(point(split_n=2)).num_gpu_blocks - build_scheduler_config(with_draft).num_gpu_blocks
    assert lost in (7_659, 7_660)


def test_a_draft_that_cannot_fit_beside_the_target_is_refused():
    with pytest.raises(ValueError, match=r"llama-3-8b and its draft model does not fit on h200"):
        build_scheduler_config(point(device="h200", split_n=2, draft={"model": "deepseek-v3"}))
