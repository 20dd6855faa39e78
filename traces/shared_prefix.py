"""Shared system prompts: token identity (`Request.prefix_hash_ids`) for generated traces.

`with_shared_prefixes` puts one of `num_prefixes` shared prefixes of `shared_prefix_tokens` in
front of every prompt, as `vllm bench serve --dataset-name prefix_repetition` does
(`vllm/benchmarks/datasets.py` `PrefixRepetitionRandomDataset.sample`: `num_prefixes` random
prefixes of `prefix_len` tokens, each followed by `num_requests // num_prefixes` random suffixes,
then shuffled). Here every request is kept (prefix k serves requests k, k + num_prefixes, ...
of a seeded permutation, so the shares differ by at most one) and its drawn prompt length is
the suffix.

Generated ids name `GENERATED_BLOCK_TOKENS`-token blocks (the KV block size of the engine may
differ: `simulator.scheduler.prefix_cache.block_keys` maps them). Id ranges: prefix p's block b
is `PREFIX_ID_BASE + p * BLOCKS_PER_STREAM + b`; `traces.sessions` uses `SESSION_ID_BASE` the
same way, so ids of different kinds never meet.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from traces.arrivals import check_count
from traces.request import Request

GENERATED_BLOCK_TOKENS = 16
BLOCKS_PER_STREAM = 10**7  # 160 M tokens per prefix or session: far beyond any max_model_len
PREFIX_ID_BASE = 10**14
SESSION_ID_BASE = 2 * 10**14


def check_shared_prefix(shared_prefix_tokens: int, num_prefixes: int) -> None:
    """Raises ValueError unless shared_prefix_tokens >= 0 and num_prefixes >= 1 are ints."""
    check_count(shared_prefix_tokens, "shared_prefix_tokens")
    check_count(num_prefixes, "num_prefixes")
    if num_prefixes < 1:
        raise ValueError(f"num_prefixes must be >= 1, got {num_prefixes}")


def prefix_ids(prefix_index: int, shared_prefix_tokens: int) -> tuple[int, ...]:
    """Ids of the full `GENERATED_BLOCK_TOKENS`-token blocks of shared prefix `prefix_index`
    (a partial last block also holds a request's own tokens, so no id names it)."""
    base = PREFIX_ID_BASE + prefix_index * BLOCKS_PER_STREAM
    return tuple(range(base, base + shared_prefix_tokens // GENERATED_BLOCK_TOKENS))


def prefix_assignment(num_requests: int, num_prefixes: int, seed: int) -> np.ndarray:
    """Prefix index of each request: equal shares (within one), in a seeded random order."""
    order = np.random.default_rng([seed, 0x5EED]).permutation(num_requests)
    assignment = np.empty(num_requests, dtype=np.int64)
    assignment[order] = np.arange(num_requests) % num_prefixes
    return assignment


def with_shared_prefixes(requests: list[Request], shared_prefix_tokens: int, num_prefixes: int = 1,
                         seed: int = 0) -> list[Request]:
    """`requests` with a shared prefix in front of each prompt (module docstring).

    Returns:
        New requests, same ids, arrivals and outputs; prompt_tokens + shared_prefix_tokens, and
        `prefix_hash_ids` naming the prefix's full blocks (`prefix_block_tokens` 16).

    Raises:
        ValueError: a negative prefix length, num_prefixes < 1, or requests that already carry
            prefix ids.
    """
    check_shared_prefix(shared_prefix_tokens, num_prefixes)
    if shared_prefix_tokens == 0:
        return list(requests)
    if any(r.prefix_hash_ids for r in requests):
        raise ValueError("these requests already carry prefix_hash_ids (a trace file's); a generated shared "
                         "prefix would replace them: set shared_prefix_tokens only on generated traces")
    assignment = prefix_assignment(len(requests), num_prefixes, seed)
    ids = [prefix_ids(p, shared_prefix_tokens) for p in range(num_prefixes)]
    return [dataclasses.replace(r, prompt_tokens=r.prompt_tokens + shared_prefix_tokens,
                                prefix_hash_ids=ids[p], prefix_block_tokens=GENERATED_BLOCK_TOKENS)
            for r, p in zip(requests, assignment.tolist())]
