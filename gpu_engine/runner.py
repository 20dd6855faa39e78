"""Run one forward pass per step over the paged KV cache."""
from __future__ import annotations

from contextlib import contextmanager

import torch

from gpu_engine.inputs import SequenceWork, prepare_inputs
from gpu_engine.kv_cache import KVCache
from gpu_engine.model import Llama


class ModelRunner:
    """The model and its KV cache; `run` executes one step's sequences in one forward pass.

    Args:
        model: a built `Llama`.
        num_blocks: KV pool size in blocks (the scheduler's `num_gpu_blocks`).
        block_size: tokens per block (the scheduler's).
    """

    def __init__(self, model: Llama, num_blocks: int, block_size: int):
        weight = model.embed_tokens.weight
        self.model = model
        self.device = weight.device
        self.block_size = block_size
        self.kv_cache = KVCache(model.args.spec, num_blocks, block_size, weight.dtype, weight.device)

    @torch.inference_mode()
    def run(self, work: list[SequenceWork]) -> torch.Tensor:
        """Forward all of a step's query tokens; return the logits of the sampled rows.

        Returns:
            (sum of num_logits, vocab) logits in at least float32, sequences in `work` order.
        """
        inputs = prepare_inputs(work, self.block_size, self.device)
        hidden = self.model(inputs.input_ids, inputs.positions, inputs.meta, self.kv_cache)
        return self.model.compute_logits(hidden[inputs.logits_indices])


@contextmanager
def cpu_threads(num_threads: int):
    """Run the block with torch limited to `num_threads` CPU threads (restored afterwards).

    The tiny CPU models do matmuls of a few microseconds, where OpenMP threads on a shared
    machine only add contention (one thread is several times faster on the 2-core CI machine).
    """
    before = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
