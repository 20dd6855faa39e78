"""Turn one step's work (token ids per scheduled sequence) into the model's flat input tensors."""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Sequence

import numpy as np
import torch

from gpu_engine.attention import AttentionMetadata


@dataclass(frozen=True)
class SequenceWork:
    """One sequence's share of a step, as the engine executes it.

    Attributes:
        request_id: the request.
        token_ids: the query tokens computed this step (a prefill chunk; the pending token of
            a decode; the pending token and the proposed drafts of a verify).
        context_len: tokens already in the KV cache (the plan's `num_context_tokens`).
        block_table: the scheduler's physical block ids for the sequence.
        num_logits: trailing query positions whose logits are sampled: 0 for a non-final
            prefill chunk, 1 for a final chunk or decode, 1 + drafts for a verify.
    """

    request_id: int
    token_ids: Sequence[int]
    context_len: int
    block_table: Sequence[int]
    num_logits: int


@dataclass
class StepInputs:
    """Model inputs of a step: T tokens, B sequences, n sampled rows.

    Attributes:
        input_ids: int64 (T,); positions: int64 (T,); meta: attention metadata;
        logits_indices: int64 (n,), rows of the hidden states whose logits are computed, in
            sequence order (each sequence's `num_logits` trailing positions).
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    logits_indices: torch.Tensor


def prepare_inputs(work: list[SequenceWork], block_size: int, device: torch.device | str) -> StepInputs:
    """Flatten a step's sequences into tensors on `device`; slots come from each block table.

    Raises:
        ValueError: a sequence's block table holds fewer than ceil((context + query) / block_size)
            blocks (the plan did not reserve the KV the step writes), or a sequence has no query.
    """
    q_lens = np.fromiter((len(w.token_ids) for w in work), np.int64, len(work))
    ctx_lens = np.fromiter((w.context_len for w in work), np.int64, len(work))
    if (q_lens < 1).any():
        raise ValueError(f"request {work[int(np.argmin(q_lens))].request_id}: a scheduled sequence has no query tokens")
    seq_lens = ctx_lens + q_lens
    query_start = np.concatenate(([0], np.cumsum(q_lens)))
    num_tokens = int(query_start[-1])
    input_ids = np.fromiter(chain.from_iterable(w.token_ids for w in work), np.int64, num_tokens)
    offsets = np.arange(num_tokens) - np.repeat(query_start[:-1], q_lens)
    positions = offsets + np.repeat(ctx_lens, q_lens)
    block_tables = _block_tables(work, seq_lens, block_size)
    seq_index = np.repeat(np.arange(len(work)), q_lens)
    slots = block_tables[seq_index, positions // block_size].astype(np.int64) * block_size + positions % block_size
    num_logits = np.fromiter((w.num_logits for w in work), np.int64, len(work))
    logits_indices = np.concatenate([np.arange(end - n, end) for end, n in zip(query_start[1:], num_logits)])

    def put(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array)).to(device=device, dtype=dtype)

    meta = AttentionMetadata(
        slot_mapping=put(slots, torch.int64), query_start=put(query_start, torch.int32),
        context_lens=put(ctx_lens, torch.int32), seq_lens=put(seq_lens, torch.int32),
        block_tables=put(block_tables, torch.int32), max_query_len=int(q_lens.max()),
        query_lens_list=q_lens.tolist(), context_lens_list=ctx_lens.tolist())
    return StepInputs(put(input_ids, torch.int64), put(positions, torch.int64), meta,
                      put(logits_indices.astype(np.int64), torch.int64))


def _block_tables(work: list[SequenceWork], seq_lens: np.ndarray, block_size: int) -> np.ndarray:
    """int32 (B, max_blocks): each sequence's first ceil(seq_len / block_size) block ids, 0-padded."""
    needed = -(-seq_lens // block_size)
    tables = np.zeros((len(work), int(needed.max())), dtype=np.int32)
    for i, (w, n) in enumerate(zip(work, needed.tolist())):
        if len(w.block_table) < n:
            raise ValueError(
                f"request {w.request_id}: block table holds {len(w.block_table)} blocks of {block_size} "
                f"tokens, too few for {int(seq_lens[i])} tokens (context {w.context_len} + query "
                f"{len(w.token_ids)}); the plan must reserve the KV it computes")
        tables[i, :n] = w.block_table[:n]
    return tables
