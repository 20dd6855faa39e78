"""vLLM V1 keeps block 0 of its pool as the null block (vllm/v1/core/block_pool.py BlockPool.__init__):
of the "# GPU blocks" it logs, one fewer hold requests' KV."""
from __future__ import annotations

import pytest

from experiments.config import SweepConfig
from experiments.deployment import build_scheduler_config
from profiler import get_device_spec, get_model_spec, kv_pool_blocks

TRACE = {"kind": "synthetic", "qps": 1, "prompt_tokens": 10, "output_tokens": 10, "num_requests": 4}


def test_vllm_v1_serves_one_block_fewer_than_it_logs():
    # An override of 1234 blocks (vLLM's --num-gpu-blocks-override) leaves 1233 for requests.
    pinned = SweepConfig(trace=TRACE, engine={"scheduler": "vllm_v1", "chunk_size": 512, "num_gpu_blocks": 1234})
    assert build_scheduler_config(pinned).num_gpu_blocks == 1233
    computed = SweepConfig(trace=TRACE, engine={"scheduler": "vllm_v1", "chunk_size": 512})
    e = computed.engine
    logged = kv_pool_blocks(get_model_spec(computed.model), get_device_spec(computed.device),
                            gpu_memory_utilization=e.gpu_memory_utilization, block_size=e.block_size,
                            max_num_batched_tokens=512, max_num_seqs=e.max_num_seqs)
    assert build_scheduler_config(computed).num_gpu_blocks == logged - 1


def test_other_schedulers_keep_the_whole_pool():
    pinned = SweepConfig(trace=TRACE, engine={"scheduler": "sarathi", "chunk_size": 512, "num_gpu_blocks": 1234})
    assert build_scheduler_config(pinned).num_gpu_blocks == 1234


def test_a_one_block_vllm_v1_pool_is_an_error():
    pinned = SweepConfig(trace=TRACE, engine={"scheduler": "vllm_v1", "chunk_size": 512, "num_gpu_blocks": 1})
    with pytest.raises(ValueError, match="engine.num_gpu_blocks 1 leaves vllm_v1 no KV block: .*null block; give at least 2"):
        build_scheduler_config(pinned)
