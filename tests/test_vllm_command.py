"""The `vllm serve` command of a point (experiments/planning/vllm_flags.py): the model's
repository, the flags read back from a points table, what the command cannot reproduce."""
from __future__ import annotations

import json

import pytest

from experiments.config import SweepConfig
from experiments.planning.vllm_flags import (HF_MODEL_IDS, served_point_from_row, vllm_caveats, vllm_model_argument,
                                             vllm_serve_command)
from profiler.model_spec import BUILTIN_ALIASES, BUILTIN_MODELS


def test_every_built_in_model_has_a_repository_and_paths_pass_as_folders(tmp_path):
    assert sorted(HF_MODEL_IDS) == sorted([*BUILTIN_MODELS, *BUILTIN_ALIASES])
    assert vllm_model_argument("llama-3-8b") == "meta-llama/Meta-Llama-3-8B"
    config = tmp_path / "m" / "config.json"
    config.parent.mkdir()
    config.write_text("{}")
    assert vllm_model_argument(str(config)) == str(config.parent)
    with pytest.raises(ValueError, match="no Hugging Face repository is known"):
        vllm_model_argument("my-model")


def test_command_of_a_split_n_point_read_back_from_its_table_row():
    point = SweepConfig.model_validate({
        "trace": {"kind": "poisson", "qps": 1},
        "engine": {"scheduler": "vllm_v1", "chunk_size": 1024, "max_num_seqs": 32, "split_n": 3,
                   "acceptance": [0.9, 0.8, 0.7], "draft": {"model": "llama-2-7b"}, "policy": "priority",
                   "kv_cache_dtype": "fp8", "seed": 7}})
    # A points table keeps the settings the scheduler read, lists and mappings as JSON text.
    row = {"model": "llama-3-8b", **point.engine.used_settings(), "num_gpu_blocks": 999}
    assert row["acceptance"] == json.dumps([0.9, 0.8, 0.7])
    served = served_point_from_row(row)
    assert served.engine == point.engine.model_copy(update={"num_gpu_blocks": None})
    assert vllm_serve_command(served) == (
        "vllm serve meta-llama/Meta-Llama-3-8B --enable-chunked-prefill --max-num-batched-tokens 1024 "
        "--max-num-seqs 32 --block-size 16 --gpu-memory-utilization 0.9 --kv-cache-dtype fp8 "
        "--scheduling-policy priority --speculative-config "
        "'{\"method\": \"draft_model\", \"model\": \"llama-2-7b\", \"num_speculative_tokens\": 3}' "
        "--dtype bfloat16 --seed 7")
    assert vllm_serve_command(point) == vllm_serve_command(served)


def test_caveats_name_what_vllm_cannot_reproduce():
    point = SweepConfig.model_validate({"trace": {"kind": "poisson", "qps": 1},
                                        "engine": {"scheduler": "sarathi", "preemption": "swap", "replicas": 2,
                                                   "num_gpu_blocks": 100}})
    notes = vllm_caveats(point)
    assert len(notes) == 3
    assert notes[0].startswith("the point was simulated under `sarathi`; vLLM runs its own (V1) policy")
    assert notes[1] == "engine.preemption is swap; vLLM V1 preempts by recompute only"
    assert notes[2] == "engine.replicas is 2: start one server per replica behind a round_robin router"
    assert "--num-gpu-blocks-override 100" in vllm_serve_command(point)
