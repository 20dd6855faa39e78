"""Per-step records (DESIGN.md, "Records"), collected in typed numpy columns so logging stays cheap
and a run of millions of steps holds 88 bytes a step, not 11 Python lists."""
from __future__ import annotations

from itertools import chain
from typing import NamedTuple

import numpy as np
import pandas as pd

from simulator.records import GrowableArray
from simulator.records_parquet import ROW_GROUP_ROWS, RowGroupWriter
from simulator.records_stream import with_constants
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
_FLOAT_COLUMNS = ("start_s", "duration_s")
# Steps staged as tuples before they become typed rows. 2,048 keeps a flush's temporaries (the
# rows array, ~180 KB) in the cache and in malloc's reused heap: 8,192 (720 KB arrays, each a fresh
# mmap in a new process) cost 0.06-0.08 CPU-s a 228k-step point against 0.05 (BENCHMARKS, seventh pass).
_FLUSH_STEPS = 2048
_COLUMN = {name: j for j, name in enumerate(STEP_COLUMNS)}


class StepStats(NamedTuple):
    """What the summary needs of the step table when the table itself is not kept."""

    num_steps: int
    kv_blocks_used_sum: int
    kv_blocks_used_max: int

    @staticmethod
    def merge(parts: list["StepStats"]) -> "StepStats":
        return StepStats(sum(p.num_steps for p in parts), sum(p.kv_blocks_used_sum for p in parts),
                         max((p.kv_blocks_used_max for p in parts), default=0))


class StepLog:
    """Append-only log of executed steps; `to_frame()` gives one row per step.

    Columns: replica_id; start_s, duration_s (seconds; with pipeline parallelism the duration
    spans every stage of the micro-batch); token counts; batch_size (sequences in the step);
    kv_blocks_used (pool blocks allocated after the step's allocations); num_preempted;
    swap_tokens (KV tokens moved to or from host memory). All int64 but the two times (float64).

    Args:
        keep: keep the rows; False keeps only `stats()` (num_steps, kv_blocks_used sum and max),
            for huge runs (`output.steps: false`).
        path: write the rows to this Parquet file a row group at a time as the run goes
            (`simulator.records_stream`), finished by `close_file`; only `kv_blocks_used` stays
            in memory (`kv_blocks_used()`). Ignored when not `keep`.
        constants: leading columns of one value each in the file (a sweep's `point_id`).
    """

    def __init__(self, keep: bool = True, path=None, constants: dict[str, int] | None = None) -> None:
        self.keep = keep
        self._staged: list[tuple] = []  # scheduled steps' rows
        # Decode windows' rows as columns: (scheduled rows staged before it, steps, batch size,
        # replica id) per window, and its steps' starts, durations and KV blocks one after another.
        self._windows: list[tuple[int, int, int, int]] = []
        self._window_starts_s: list[float] = []
        self._window_durations_s: list[float] = []
        self._window_kv_blocks_used: list[int] = []
        self._columns = {name: GrowableArray(np.float64 if name in _FLOAT_COLUMNS else np.int64)
                         for name in STEP_COLUMNS}
        self._stats = StepStats(0, 0, 0)
        self._writer = RowGroupWriter(path, ROW_GROUP_ROWS) if keep and path is not None else None
        self._constants = dict(constants or {})
        self._kv_blocks_used = GrowableArray(np.int64)  # with a file: the one column kept

    def __len__(self) -> int:
        return self._stats.num_steps + len(self._staged) + len(self._window_starts_s)

    def append(self, start_s: float, duration_s: float, plan: BatchPlan, replica_id: int = 0) -> None:
        counts = plan.counts
        if counts is not None:  # counted by the scheduler (every simulated step): no property calls
            prefill_tokens, prefill_seqs, draft_tokens, num_tokens = counts
        else:
            prefill_tokens, prefill_seqs, draft_tokens = plan.num_prefill_tokens, plan.num_prefill_seqs, plan.num_draft_tokens
            num_tokens = plan.num_tokens
        self._staged.append((replica_id, start_s, duration_s, prefill_tokens, num_tokens - prefill_tokens,
                             draft_tokens, len(plan.columns.request_ids), prefill_seqs, plan.kv_blocks_used,
                             len(plan.preempted_ids), plan.swap_in_tokens + plan.swap_out_tokens))
        if len(self._staged) >= _FLUSH_STEPS:
            self._flush()

    def extend_decodes(self, starts_s: list[float], durations_s: list[float], batch_size: int,
                       kv_blocks_used: list[int], replica_id: int = 0) -> None:
        """Rows for a run of plain decode steps of `batch_size` sequences (a decode window):
        staged as columns (three list extends), not one row tuple a step."""
        self._windows.append((len(self._staged), len(starts_s), batch_size, replica_id))
        self._window_starts_s.extend(starts_s)
        self._window_durations_s.extend(durations_s)
        self._window_kv_blocks_used.extend(kv_blocks_used)
        if len(self._window_starts_s) >= _FLUSH_STEPS:
            self._flush()

    def extend_prefill_chunks(self, starts_s: list[float], durations_s: list[float], chunks: list[int],
                              num_decodes: int, kv_blocks_used: list[int], replica_id: int = 0,
                              admitted_tokens: int = 0) -> None:
        """Rows for a replica's prefill window: step j ran `num_decodes` plain decodes and one
        prompt's chunk of `chunks[j]` tokens, the last step also an admitted request's first
        chunk of `admitted_tokens` (when not 0); the rows `append` gives those steps' plans."""
        staged = self._staged
        batch_size = num_decodes + 1
        for start_s, duration_s, chunk, kv in zip(starts_s, durations_s, chunks, kv_blocks_used):
            staged.append((replica_id, start_s, duration_s, chunk, num_decodes, 0, batch_size, 1, kv, 0, 0))
        if admitted_tokens:
            last = staged[-1]
            staged[-1] = last[:3] + (last[3] + admitted_tokens, num_decodes, 0, batch_size + 1, 2) + last[8:]
        if len(staged) >= _FLUSH_STEPS:
            self._flush()

    def _staged_rows(self) -> np.ndarray:
        """The staged rows, in step order, as one float64 array (num_rows, len(STEP_COLUMNS)):
        the scheduled steps' tuples and the decode windows' columns interleaved where they
        were logged. Counts are far below 2**53, so exact as floats."""
        staged, self._staged = self._staged, []
        windows, self._windows = self._windows, []
        if not windows:
            return _rows_array(staged)
        before, steps, batch, replica = (np.array(column, dtype=np.int64) for column in zip(*windows))
        num_window_rows = int(steps.sum())
        rows = np.empty((len(staged) + num_window_rows, len(STEP_COLUMNS)), dtype=np.float64)
        # A window's t-th row lands after the scheduled rows staged before it and every earlier
        # window row: at (scheduled rows before it) + (window rows before it).
        at = np.repeat(before, steps) + np.arange(num_window_rows)
        scheduled = np.ones(rows.shape[0], dtype=bool)
        scheduled[at] = False
        if staged:
            rows[scheduled] = _rows_array(staged)
        window_rows = np.zeros((num_window_rows, len(STEP_COLUMNS)), dtype=np.float64)
        window_rows[:, _COLUMN["replica_id"]] = np.repeat(replica, steps)
        window_rows[:, _COLUMN["start_s"]] = self._window_starts_s
        window_rows[:, _COLUMN["duration_s"]] = self._window_durations_s
        window_rows[:, _COLUMN["num_decode_tokens"]] = window_rows[:, _COLUMN["batch_size"]] = np.repeat(batch, steps)
        window_rows[:, _COLUMN["kv_blocks_used"]] = self._window_kv_blocks_used
        rows[at] = window_rows
        self._window_starts_s, self._window_durations_s, self._window_kv_blocks_used = [], [], []
        return rows

    def _flush(self) -> None:
        if not (self._staged or self._windows):
            return
        rows = self._staged_rows()
        kv_blocks_used = rows[:, _COLUMN["kv_blocks_used"]].astype(np.int64)
        self._add_stats(len(rows), kv_blocks_used)
        if self.keep:
            for j, (name, column) in enumerate(self._columns.items()):
                column.extend(rows[:, j])
        if self._writer is not None:
            self._kv_blocks_used.extend(kv_blocks_used)
            if len(self._columns["start_s"]) >= ROW_GROUP_ROWS:
                self._write_rows(final=False)

    def _write_rows(self, final: bool) -> None:
        """Write the held rows (all of them when `final`, else whole row groups) to the file."""
        columns = {name: column.release() for name, column in self._columns.items()}
        held = columns["start_s"].size
        end = held if final else held - held % ROW_GROUP_ROWS
        self._writer.write(with_constants(_frame({name: c[:end] for name, c in columns.items()}), self._constants))
        for name, column in self._columns.items():
            column.extend(columns[name][end:])

    def close_file(self) -> None:
        """Write the last rows and finish the file (`path`); nothing to do without one."""
        if self._writer is not None:
            self._flush()
            self._write_rows(final=True)
            self._writer.close()
            self._writer = None

    def kv_blocks_used(self) -> np.ndarray:
        """Every step's `kv_blocks_used`, in order, of a log that wrote its rows to a file."""
        self._flush()
        return self._kv_blocks_used.view()

    def _add_stats(self, n: int, kv_blocks_used: np.ndarray) -> None:
        if n:
            s = self._stats
            self._stats = StepStats(s.num_steps + n, s.kv_blocks_used_sum + int(kv_blocks_used.sum()),
                                    max(s.kv_blocks_used_max, int(kv_blocks_used.max())))

    def stats(self) -> StepStats:
        self._flush()
        return self._stats

    def to_frame(self) -> pd.DataFrame:
        """One row per step (empty, with the columns, when the rows were not kept); the log
        hands its columns to the frame and is empty afterwards."""
        self._flush()
        return _frame({name: column.release() for name, column in self._columns.items()})


def _rows_array(rows: list[tuple]) -> np.ndarray:
    """Row tuples of `STEP_COLUMNS` as one float64 array (len(rows), columns), by one C-level
    pass over their values (faster than `np.array` of the tuples)."""
    width = len(STEP_COLUMNS)
    return np.fromiter(chain.from_iterable(rows), np.float64, len(rows) * width).reshape(len(rows), width)


def _frame(columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """The step frame of `STEP_COLUMNS` arrays (one length)."""
    frame = pd.DataFrame(index=pd.RangeIndex(len(columns["start_s"])))
    for name in STEP_COLUMNS:
        frame[name] = columns[name]
    return frame

