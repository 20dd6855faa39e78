"""Turn columns of a trace into `Request`s in arrival order, the one convention all sources share."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from traces.request import Request, requests_from_columns


def requests_in_arrival_order(
    arrival_s: np.ndarray,
    prompt_tokens: np.ndarray,
    output_tokens: np.ndarray,
    priority: np.ndarray | None = None,
    prefix_hash_ids: Sequence[tuple[int, ...]] | None = None,
    prefix_block_tokens: np.ndarray | None = None,
) -> list[Request]:
    """Build requests sorted by arrival, the first at 0.0 s, numbered 0..n-1 in that order.

    The sort is stable, so requests that share an arrival time keep their input order (BurstGPT
    logs whole seconds and Mooncake whole milliseconds, so ties are common; case 13 of
    `../shared/cases/README.md`). Arrivals are shifted so the earliest is 0.0.

    Args:
        arrival_s: arrival times in seconds, shape (n,), any origin.
        prompt_tokens, output_tokens: token counts, shape (n,), already validated (>= 1).
        priority: shape (n,) integers, or None for all 0.
        prefix_hash_ids: n tuples of prefix-block hashes, or None for none.
        prefix_block_tokens: shape (n,) tokens per hash block, or None for 512 (Mooncake's).
    """
    arrival_s = np.asarray(arrival_s, dtype=float)
    order = np.argsort(arrival_s, kind="stable")
    start_s = arrival_s[order[0]] if order.size else 0.0
    arrivals = (arrival_s[order] - start_s).tolist()
    prompts = np.asarray(prompt_tokens, dtype=np.int64)[order].tolist()
    outputs = np.asarray(output_tokens, dtype=np.int64)[order].tolist()
    priorities = [0] * order.size if priority is None else np.asarray(priority, dtype=np.int64)[order].tolist()
    hashes = [()] * order.size if prefix_hash_ids is None else [prefix_hash_ids[i] for i in order]
    sizes = ([512] * order.size if prefix_block_tokens is None
             else np.asarray(prefix_block_tokens, dtype=np.int64)[order].tolist())
    return requests_from_columns(range(order.size), arrivals, prompts, outputs, priorities, hashes, sizes)
