"""Replica-level scheduler settings: plain values, validated by experiments/config.py."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Knobs shared by the schedulers (defaults as Sarathi-Serve, REFERENCE.md §1.2).

    Attributes:
        num_gpu_blocks: KV pool size in blocks (from `profiler.kv_pool_blocks` or an override).
        block_size: tokens per KV block.
        max_model_len: longest prompt + output a request may have.
        max_num_seqs: cap on running sequences (batch size).
        chunk_size: per-step token budget of chunking schedulers (sarathi, vllm_v1,
            simple_chunking, fastgen); vLLM's --max-num-batched-tokens with chunked prefill.
        max_num_batched_tokens: per-step token budget of non-chunking schedulers (vllm v0, orca,
            faster_transformer); None means max_model_len (Sarathi-Serve's default).
        watermark_fraction: share of the pool kept free at admission; None = the policy's own
            (1 % as Sarathi-Serve and vLLM v0; 0 for vllm_v1, whose `allocate_slots` keeps none).
        policy: "fcfs" (arrival order) or "priority" (lower `Request.priority` first, then
            arrival; vLLM's --scheduling-policy priority).
        preemption: "recompute" (drop the KV, prefill again) or "swap" (copy the KV to host
            memory and back; the replica prices the transfer).
        split_n: speculative depth N: each decode may verify up to N draft tokens per step.
        long_prefill_token_threshold: vllm_v1 only: cap on one request's chunk per step (None = off).
        enable_prefix_caching: keep freed full KV blocks cached for reuse (vLLM V1's automatic
            prefix caching, `simulator.scheduler.prefix_cache`); None = the policy's default
            (on for vllm_v1, as vLLM; off elsewhere). True for a policy that cannot use it is an
            error (`Scheduler.__init__`).
        num_lookahead_tokens: vllm_v1 only: KV slots each running request reserves beyond its
            scheduled tokens, for a KV-caching proposer (a draft model, EAGLE, MTP) to write its
            next drafts: vLLM sets it to num_speculative_tokens for those, 0 for n-gram
            (`Scheduler.__init__`, `allocate_slots(..., num_lookahead_tokens=...)` in
            vllm/v1/core/sched/scheduler.py).
        draft_proposals: n-gram drafting's proposal lengths to draw from (one per recorded verify
            step, e.g. an acceptance file's `proposed` column), seeded by `proposal_seed`; empty:
            every decode proposes `split_n` (a draft model always does). vLLM schedules a running
            request's `num_tokens_with_spec` — its token plus the drafts its proposer actually
            found — not N (vllm/v1/core/sched/scheduler.py `schedule()`; tests/v1/core/
            test_scheduler.py::test_schedule_spec_decoding_stats, the [[1, 2], [3]] case).
        proposal_seed: seed of the proposal draws.
        on_too_long: "reject" a request whose prompt + output exceeds max_model_len
            (`rejected_too_long`), or "truncate" its output to fit (`truncated`, vLLM's "length"
            finish; a prompt that alone fills max_model_len is still rejected).
        kv_groups: vllm_v1 only: the model's KV cache groups under vLLM's hybrid KV cache manager,
            (full-attention groups, sliding-window groups, window in tokens)
            (`profiler.kv_cache_groups`); None: one group (every layer keeps every token). With
            sliding-window groups a request holds blocks in every group and a windowed group
            frees the blocks behind its window (`simulator.scheduler.hybrid_block_manager`; with
            prefix caching `simulator.scheduler.hybrid_prefix_cache`).
    """

    num_gpu_blocks: int
    block_size: int = 16
    max_model_len: int = 8192
    max_num_seqs: int = 128
    chunk_size: int | None = None
    max_num_batched_tokens: int | None = None
    watermark_fraction: float | None = None
    policy: str = "fcfs"
    preemption: str = "recompute"
    split_n: int = 0
    long_prefill_token_threshold: int | None = None
    on_too_long: str = "reject"
    enable_prefix_caching: bool | None = None
    num_lookahead_tokens: int = 0
    draft_proposals: tuple[int, ...] = ()
    proposal_seed: int = 0
    kv_groups: tuple[int, int, int] | None = None

    def __post_init__(self) -> None:
        if self.policy not in ("fcfs", "priority"):
            raise ValueError(f"policy must be 'fcfs' or 'priority', got {self.policy!r}")
        if self.preemption not in ("recompute", "swap"):
            raise ValueError(f"preemption must be 'recompute' or 'swap', got {self.preemption!r}")
        if self.on_too_long not in ("reject", "truncate"):
            raise ValueError(f"on_too_long must be 'reject' or 'truncate', got {self.on_too_long!r}")
        if self.watermark_fraction is not None and not 0 <= self.watermark_fraction < 1:
            raise ValueError(f"watermark_fraction must be in [0, 1), got {self.watermark_fraction}")
        if self.split_n < 0:
            raise ValueError(f"split_n must be >= 0, got {self.split_n}")
        if any(p < 0 for p in self.draft_proposals):
            raise ValueError("draft_proposals must be >= 0")
        if not 0 <= self.num_lookahead_tokens <= self.split_n:
            raise ValueError(f"num_lookahead_tokens must be in [0, split_n={self.split_n}], got {self.num_lookahead_tokens}")
