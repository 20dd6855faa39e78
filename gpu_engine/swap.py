"""Swap preemption on the device: the KV of a preempted request moves to host memory and back.

The scheduler (`preemption: swap`) keeps a swapped request's `num_computed_tokens` and hands it
new blocks on re-admission; the plan names the preempted ids but not their old blocks, so the
engine remembers each running request's block table from the plans it executed. Copies run
before the step's forward pass, while the freed blocks still hold their old data.
"""
from __future__ import annotations

from simulator.scheduler import BatchPlan, blocks_for

from gpu_engine.kv_cache import KVCache


class SwapSpace:
    """Host copies of swapped-out requests' KV, and the last block table of each running request."""

    def __init__(self, kv_cache: KVCache):
        self.kv_cache = kv_cache
        self._tables: dict[int, list[int]] = {}
        self._host: dict[int, tuple] = {}

    def __len__(self) -> int:
        """Requests whose KV is in host memory."""
        return len(self._host)

    def before_forward(self, plan: BatchPlan) -> None:
        """Copy out the KV of `plan.preempted_ids`; copy back that of re-admitted requests."""
        for rid in plan.preempted_ids:
            table = self._tables.pop(rid, None)
            if table is not None:  # None: preempted again before it ran since its last swap-in
                self._host[rid] = self.kv_cache.copy_to_host(table)
        for item in plan.sequences:
            host = self._host.pop(item.request_id, None)
            if host is not None:
                n = blocks_for(item.num_context_tokens, self.kv_cache.block_size)
                self.kv_cache.copy_from_host(list(item.block_table[:n]), host[0][:, :n], host[1][:, :n])
            self._tables[item.request_id] = list(item.block_table)

    def forget(self, request_ids) -> None:
        """Drop the state of finished requests."""
        for rid in request_ids:
            self._tables.pop(rid, None)
            self._host.pop(rid, None)
