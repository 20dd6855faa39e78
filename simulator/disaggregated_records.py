"""The records of a disaggregated run (`simulator.disaggregated`): the requests file written as
the run goes, the result type, the merge of each prefill's first token into its decoded row, the
transfer columns and the per-pool summary."""
from __future__ import annotations

from typing import TYPE_CHECKING

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulator.metrics import percentile_stats
from simulator.records import RequestRecords
from simulator.records_stream import RequestsStream
from simulator.simulate import SimulationResult
from simulator.step_log import StepStats

from simulator.kv_link import TRANSFER_COLUMNS

if TYPE_CHECKING:
    from simulator.kv_link import TransferLog


class ClusterRequestsStream(RequestsStream):
    """A cluster's requests file written as the run goes (`simulator.records_stream`): each row
    group, and the scalar frame `close` returns, as `merge_first_tokens` and `with_transfers`
    make the in-memory frame's rows (the prefill's first token in front of a decoded request's
    token times, its TPOT over every token, and the transfer columns), value for value.

    A row is written once its request finished, in the decode pool or in the cluster; its
    transfer ended before its decode began, so its transfer columns are filed (by rank, from
    `transfers`, taken before each write) by then. Transfer columns take 32 bytes a request.
    The cluster's own rows (rejections, one-token requests: `cluster_records`, replica -1) are
    handed over whenever a rank hands over its own: staged until 4,096 of them, those few would
    hold back every row after them until the end.

    Raises (besides `RequestsStream`'s): RuntimeError: a transfer of a request id not in the
    run's (a bug: the records would be wrong).
    """

    def __init__(self, path, request_ids, keep_token_times: bool, constants: dict[str, int],
                 num_prefill: int, transfers: TransferLog) -> None:
        super().__init__(path, request_ids, keep_token_times, constants)
        self.num_prefill, self.transfers = num_prefill, transfers
        self.cluster_records: RequestRecords | None = None  # set by the cluster, once made
        n = self.ids.size
        self.transfer_columns = {"prefill_replica_id": np.full(n, -1, np.int64),
                                 "kv_transfer_start_s": np.full(n, np.nan),
                                 "kv_transfer_end_s": np.full(n, np.nan),
                                 "decode_replica_id": np.full(n, -1, np.int64)}

    def add(self, replica_id: int, *rows) -> None:
        super().add(replica_id, *rows)
        if replica_id != -1 and self.cluster_records is not None:
            self.cluster_records.flush()

    def _file_transfers(self) -> None:
        rows = self.transfers.take()
        if not rows:
            return
        columns = dict(zip(TRANSFER_COLUMNS, (np.array(c, dtype=dtype)
                                               for c, dtype in zip(zip(*rows), TRANSFER_COLUMNS.values()))))
        ids = columns["request_id"]
        ranks = np.searchsorted(self.ids, ids)
        if (ranks >= self.ids.size).any() or (self.ids[np.minimum(ranks, self.ids.size - 1)] != ids).any():
            raise RuntimeError("a KV transfer's request id is not one of the run's: its records would be wrong")
        for name, column in self.transfer_columns.items():
            column[ranks] = columns[name]

    tokens_as_arrow = False  # `rows_frame` puts the prefill's first token in front of them

    def rows_frame(self, start: int, end: int, tokens: pd.Series | None) -> pd.DataFrame:
        self._file_transfers()
        part = merge_first_tokens(super().rows_frame(start, end, tokens), self.num_prefill)
        for name, column in self.transfer_columns.items():  # `with_transfers`' columns, in its order
            part[name] = column[start:end]
        return part


@dataclass
class DisaggregatedResult(SimulationResult):
    """`SimulationResult` of a disaggregated run.

    `requests` has, besides the usual columns, `prefill_replica_id`, `kv_transfer_start_s`,
    `kv_transfer_end_s` and `decode_replica_id` (NaN / -1 for requests that never crossed the
    link: rejected, or done after one token); `replica_id` is the replica (the DP rank, in a
    data-parallel pool) that finished the request (prefill ids 0..P-1, decode ids P..P+D-1 over
    the pools' ranks, instance by instance; -1 for rejections and one-token requests, recorded by
    the cluster). `steps` holds both pools' steps under those replica ids.
    `summary` adds the keys of `pool_summary`.
    """

    num_prefill_replicas: int = 0


def merge_first_tokens(frame: pd.DataFrame, num_prefill: int) -> pd.DataFrame:
    """Requests finished in the decode pool: put the prefill's first token back in front of their
    token times, and TPOT over every token: (completion − first token) / (generated − 1)."""
    decoded = (frame["replica_id"].to_numpy() >= num_prefill) & (frame["generated_tokens"].to_numpy() > 0)
    if "token_times_s" in frame:
        times = list(frame["token_times_s"])
        first = frame["first_token_s"].to_numpy()
        for row in np.flatnonzero(decoded):
            times[row] = np.r_[first[row], times[row]]
        frame["token_times_s"] = pd.Series(times, index=frame.index, dtype=object)
    generated = frame["generated_tokens"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = (frame["completion_s"].to_numpy() - frame["first_token_s"].to_numpy()) / (generated - 1)
    frame["tpot_s"] = np.where(decoded & (generated > 1), tpot, frame["tpot_s"].to_numpy())
    return frame


def with_transfers(frame: pd.DataFrame, transfers: pd.DataFrame) -> pd.DataFrame:
    merged = frame.merge(transfers.drop(columns="prefill_end_s"), on="request_id", how="left")
    for column in ("prefill_replica_id", "decode_replica_id"):
        merged[column] = merged[column].fillna(-1).astype(np.int64)
    return merged


def pool_summary(requests: pd.DataFrame, pool_steps: dict[str, tuple[np.ndarray, np.ndarray]] | None,
                 cluster, makespan_s: float) -> dict:
    """Per-pool and transfer metrics of a disaggregated run, from the requests' scalar columns
    and, per pool ("prefill", "decode"), its steps' `duration_s` and `kv_blocks_used` in replica
    order (`pool_steps`; None without the step table: the logs' `StepStats`). `cluster`: the
    run's `simulator.disaggregated._Cluster` (its pools' replicas and schedulers, and
    `kv_bytes_per_token`), not annotated by type: that module imports this one.

    Keys: `prefill_utilization`, `decode_utilization` (busy step time / (ranks × makespan), a
    rank's dummy steps in a lockstep DP instance not counted; NaN without the step table); `prefill_kv_usage_mean/_max`, `decode_kv_usage_mean/_max`
    (blocks in use, transfer holds included, over each rank's blocks, per step);
    `kv_transfer_s_*` (link time per request: latency + bytes / bandwidth, seconds),
    `kv_transfer_queue_s_*` (from the first token to the transfer's start: waiting for the link
    and for room in the decode pool; 0 for a layer-pipelined transfer that streamed); percentiles
    as `simulator.metrics.percentile_stats`;
    `kv_transfer_bytes` (total moved per link). `kv_usage_mean/_max` of the summary are the
    decode pool's.
    """
    out: dict[str, float] = {}
    pools = (("prefill", cluster.prefill_replicas, cluster.prefill_pool),
             ("decode", cluster.decode_replicas, cluster.decode_pool))
    for name, replicas, schedulers in pools:
        blocks = schedulers[0].config.num_gpu_blocks
        if pool_steps is not None:
            durations_s, kv_blocks_used = pool_steps[name]
            busy_s = float(pd.Series(durations_s).sum())  # pandas' sum of the column, as the frame's
            out[f"{name}_utilization"] = busy_s / (len(replicas) * makespan_s) if makespan_s > 0 else math.nan
            usage = kv_blocks_used / blocks
            out[f"{name}_kv_usage_mean"] = float(usage.mean()) if usage.size else math.nan
            out[f"{name}_kv_usage_max"] = float(usage.max()) if usage.size else math.nan
        else:
            stats = StepStats.merge([r.steps.stats() for r in replicas])
            out[f"{name}_utilization"] = math.nan
            out[f"{name}_kv_usage_mean"] = (stats.kv_blocks_used_sum / stats.num_steps / blocks
                                            if stats.num_steps else math.nan)
            out[f"{name}_kv_usage_max"] = stats.kv_blocks_used_max / blocks if stats.num_steps else math.nan
    moved = requests["kv_transfer_start_s"].notna().to_numpy()
    start = requests["kv_transfer_start_s"].to_numpy()[moved]
    out.update(percentile_stats("kv_transfer_s", requests["kv_transfer_end_s"].to_numpy()[moved] - start))
    # A layer-pipelined transfer that streamed with its last prefill step began before its first token: 0 queued.
    queued_s = np.maximum(0.0, start - requests["first_token_s"].to_numpy()[moved])
    out.update(percentile_stats("kv_transfer_queue_s", queued_s))
    out["kv_transfer_bytes"] = float(requests["prompt_tokens"].to_numpy()[moved].sum() * cluster.kv_bytes_per_token)
    return out
