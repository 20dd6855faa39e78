"""Per-step records (DESIGN.md, "Records"), collected column-wise so logging stays cheap."""
from __future__ import annotations

import pandas as pd

from simulator.scheduler import BatchPlan

STEP_COLUMNS = (
    "replica_id",
    "start_s",
    "duration_s",
    "num_prefill_tokens",
    "num_decode_tokens",
    "num_draft_tokens",
    "batch_size",
    "num_prefill_seqs",
    "kv_blocks_used",
    "num_preempted",
    "swap_tokens",
)


class StepLog:
    """Append-only log of executed steps; `to_frame()` gives one row per step.

    Columns: replica_id; start_s, duration_s (seconds; with pipeline parallelism the duration
    spans every stage of the micro-batch); token counts; batch_size (sequences in the step);
    kv_blocks_used (pool blocks allocated after the step's allocations); num_preempted;
    swap_tokens (KV tokens moved to or from host memory).
    """

    def __init__(self) -> None:
        self._columns: dict[str, list] = {name: [] for name in STEP_COLUMNS}

    def __len__(self) -> int:
        return len(self._columns["start_s"])

    def append(self, start_s: float, duration_s: float, plan: BatchPlan, replica_id: int = 0) -> None:
        c = self._columns
        prefill_tokens = plan.num_prefill_tokens
        c["replica_id"].append(replica_id)
        c["start_s"].append(start_s)
        c["duration_s"].append(duration_s)
        c["num_prefill_tokens"].append(prefill_tokens)
        c["num_decode_tokens"].append(sum(plan.columns.query_tokens) - prefill_tokens)
        c["num_draft_tokens"].append(plan.num_draft_tokens)
        c["batch_size"].append(len(plan))
        c["num_prefill_seqs"].append(plan.num_prefill_seqs)
        c["kv_blocks_used"].append(plan.kv_blocks_used)
        c["num_preempted"].append(len(plan.preempted_ids))
        c["swap_tokens"].append(plan.swap_in_tokens + plan.swap_out_tokens)

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self._columns)

    def extend_decodes(self, starts_s: list[float], durations_s: list[float], batch_size: int,
                       kv_blocks_used: list[int], replica_id: int = 0) -> None:
        """Rows for a run of plain decode steps of `batch_size` sequences (a decode window)."""
        c = self._columns
        n = len(starts_s)
        c["replica_id"].extend([replica_id] * n)
        c["start_s"].extend(starts_s)
        c["duration_s"].extend(durations_s)
        c["num_prefill_tokens"].extend([0] * n)
        c["num_decode_tokens"].extend([batch_size] * n)
        c["num_draft_tokens"].extend([0] * n)
        c["batch_size"].extend([batch_size] * n)
        c["num_prefill_seqs"].extend([0] * n)
        c["kv_blocks_used"].extend(kv_blocks_used)
        c["num_preempted"].extend([0] * n)
        c["swap_tokens"].extend([0] * n)
