"""A run's records written to Parquet row group by row group as it goes (issue 17, item 2).

Built at the end, a requests frame that keeps every token time holds them all at once as float64
(8 bytes a token: 1.7 GB for 1M requests of ~211 tokens), however compact they were while the
run went. When the caller names the files (`RecordFiles`), the run writes them as it goes instead:

- **Requests** (`RequestsStream`): each replica hands the rows it finished (`RequestRecords`, a few
  thousand at a time) to the one stream, which files them by their rank in the trace's sorted
  request ids and writes every full row group (`ROW_GROUP_ROWS`) of consecutive ranks as soon as
  it is complete. The file is in the order `requests_table` sorts the frame (request_id), with
  the same columns and values; only the requests finished ahead of an earlier one still running
  (and a replica's last few thousand not yet handed over) wait in memory with their token times.
  The scalar columns stay in memory (~130 bytes a request) for the summary, SLOs and goodput.
- **Steps** (`simulator.step_log.StepLog(path=...)`): each replica's log writes its own file a row
  group at a time; with several replicas those are joined in replica order at the end
  (`concat_files`), as the step frame concatenates the replicas' tables. Only `kv_blocks_used`
  stays in memory (the summary's KV usage, computed from it exactly as from the table).

The TBT/ITL percentiles then read the token times back from the requests file
(`simulator.records_parquet.ParquetTokenTimes`), in the same chunks as from a frame, so the
summary is the same number for number (tests/test_records_stream.py). A closed loop is written
the same way (its ids are 0..num_requests-1: `RequestsStream.ids_if_streamable`); only a trace
whose request ids are not unique is built in memory and written at the end (`write_frames`):
the same files.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from simulator.records import SCALAR_COLUMNS, records_frame, request_views
from simulator.records_parquet import ROW_GROUP_ROWS, RowGroupWriter, concat_files, write_in_row_groups
from traces import ClosedLoopWorkload


_SCAN = 1 << 16  # finished flags looked at per step of the prefix scan


@dataclass(frozen=True)
class RecordFiles:
    """Where a run writes its records (`simulate(record_files=...)`).

    Attributes:
        requests_path: the requests file (Parquet; `requests_table`'s columns, sorted by request_id).
        steps_path: the step table (Parquet); None (or ignored) when the run keeps no steps.
        constants: leading columns of one value each in both files (a sweep's `point_id`).
    """

    requests_path: Path
    steps_path: Path | None
    constants: dict[str, int] = field(default_factory=dict)

    def step_spool(self, replica_id: int, num_replicas: int) -> Path | None:
        """The file replica `replica_id`'s step log writes: `steps_path` itself with one replica,
        else a part file beside it (named after it, so a temporary name stays one); None
        without a step file."""
        if self.steps_path is None or num_replicas == 1:
            return None if self.steps_path is None else Path(self.steps_path)
        return Path(self.steps_path).with_name(f"{Path(self.steps_path).name}.replica-{replica_id}.part")


def with_constants(frame: pd.DataFrame, constants: dict[str, int]) -> pd.DataFrame:
    """`frame` with each constant inserted as a leading column (in order), as a sweep inserts
    `point_id`."""
    for position, (name, value) in enumerate(constants.items()):
        frame.insert(position, name, value)
    return frame


class RequestsStream:
    """Finished requests of every replica, written to `path` in request_id order as the run goes.

    Args:
        path: the Parquet file (written from the first full row group; finished by `close`).
        request_ids: every request id the run will finish (unique), in any order.
        keep_token_times: write the `token_times_s` column.
        constants: leading columns (`RecordFiles.constants`).
        row_group_rows: rows per row group (default `ROW_GROUP_ROWS`).
        frontend: the run's `simulator.frontend.FrontEnd` (client and engine terms, `records_frame`).

    Raises (from `add`/`close`):
        RuntimeError: a request id not in `request_ids`, finished twice, or one never finished
            by `close` (a bug: the records would be wrong); OSError: the file cannot be written.
    """

    # Token times written as one Arrow list array per row group (`_write`); a subclass whose
    # `rows_frame` changes them sets it False.
    tokens_as_arrow = True

    def __init__(self, path: str | Path, request_ids, keep_token_times: bool, constants: dict[str, int] | None = None,
                 row_group_rows: int | None = None, frontend=None) -> None:
        self.ids = np.sort(np.asarray(request_ids, dtype=np.int64))
        if self.ids.size > 1 and not (np.diff(self.ids) > 0).all():
            raise ValueError("RequestsStream: request ids must be unique (rows are filed by their rank)")
        n = self.ids.size
        self.keep_token_times, self.constants = keep_token_times, dict(constants or {})
        self.frontend = frontend
        self.row_group_rows = row_group_rows or ROW_GROUP_ROWS
        self.columns = {name: np.empty(n, dtype=dtype) for name, dtype in SCALAR_COLUMNS.items()}
        self.tpot_s = np.empty(n, dtype=np.float64)
        self.replica_id = np.empty(n, dtype=np.int64)
        self._done = np.zeros(n, dtype=bool)
        self._ready = 0  # rows [0, _ready) are all finished
        self._written = 0  # rows [0, _written) are in the file
        self._tokens: dict[int, np.ndarray] = {}  # rank -> token times, until written
        self._writer = RowGroupWriter(path, self.row_group_rows, read_back_names=True)

    @staticmethod
    def ids_if_streamable(requests) -> np.ndarray | None:
        """The request ids a run will finish, or None when its rows cannot be filed by id up
        front (repeated ids): an open-loop trace's (a list of `Request`), or a closed loop's.

        A closed loop's requests are made as it runs, but their ids are known up front: they are
        0..num_requests-1 in issue order (`traces.ClosedLoopWorkload`, `SessionWorkload`), and
        every request issued finishes (completed or rejected). So its rows are filed by id as an
        open loop's are and the file has the same request_id order as the frame; with at most
        `num_clients` outstanding, the rows waiting in memory are those finished while an
        earlier one still runs. (A workload breaking that rule fails loudly in `add`/`close`.)"""
        if isinstance(requests, ClosedLoopWorkload):
            return np.arange(requests.num_requests, dtype=np.int64)
        if not isinstance(requests, list):
            return None
        ids = np.fromiter((r.request_id for r in requests), np.int64, len(requests))
        return ids if np.unique(ids).size == ids.size else None

    def add(self, replica_id: int, columns: dict[str, np.ndarray], tpot_s: np.ndarray,
            token_times_s: np.ndarray | None, tokens_per_request: np.ndarray) -> None:
        """Rows of finished requests: `columns` as `SCALAR_COLUMNS` (typed arrays, finish_reason
        as codes), their TPOTs, and (keeping token times) every token time of them back to back,
        `tokens_per_request` of each."""
        ids = columns["request_id"]
        ranks = np.searchsorted(self.ids, ids)
        if ranks.size and ((ranks >= self.ids.size).any() or (self.ids[np.minimum(ranks, self.ids.size - 1)] != ids).any()
                           or self._done[ranks].any() or np.unique(ranks).size != ranks.size):
            raise RuntimeError(f"replica {replica_id}: a finished request id is not in the trace or finished twice: "
                               "its records would be wrong")
        for name, column in self.columns.items():
            column[ranks] = columns[name]
        self.tpot_s[ranks] = tpot_s
        self.replica_id[ranks] = replica_id
        if self.keep_token_times:
            self._tokens.update(zip(ranks.tolist(), request_views(token_times_s, tokens_per_request)))
        self._done[ranks] = True
        while self._ready < self.ids.size:  # the finished prefix grows; scan only past its end
            window = self._done[self._ready:self._ready + _SCAN]
            if not window.all():
                self._ready += int(window.argmin())
                break
            self._ready += window.size
        while self._ready - self._written >= self.row_group_rows:
            self._write(self._written + self.row_group_rows)

    def _write(self, end: int) -> None:
        """Write rows [_written, end) and drop their token times. After the first row group
        (which gives the file its schema) the token times go to the file as one Arrow list
        array of the rows' times back to back, not as a column of numpy arrays."""
        start, self._written = self._written, end
        if not self.keep_token_times:
            self._writer.write(with_constants(self.rows_frame(start, end, None), self.constants))
            return
        views = [self._tokens.pop(rank) for rank in range(start, end)]
        if self._writer.started and self.tokens_as_arrow:
            frame = with_constants(self.rows_frame(start, end, None), self.constants)
            self._writer.write_with_arrays(frame, {"token_times_s": _list_array(views)})
        else:
            tokens = pd.Series(views, dtype=object)
            self._writer.write(with_constants(self.rows_frame(start, end, tokens), self.constants))

    def rows_frame(self, start: int, end: int, tokens: pd.Series | None) -> pd.DataFrame:
        """Rows [start, end) as the frame has them (`records_frame`), `tokens` their token times
        (None: no such column). A subclass adds its own columns here (a cluster's transfers:
        `simulator.disaggregated`), for the row groups and the frame `close` returns alike."""
        return records_frame({name: c[start:end] for name, c in self.columns.items()}, self.tpot_s[start:end],
                             self.replica_id[start:end], tokens, self.frontend)

    def close(self) -> pd.DataFrame:
        """Write the last rows, finish the file, and return the requests frame without
        `token_times_s` (and without the constants), as `requests_table` would give it."""
        if self._ready < self.ids.size:
            missing = int(self.ids[self._ready])
            raise RuntimeError(f"request {missing} never finished (no record was added for it): the run's records "
                               "would be incomplete")
        if self._written < self._ready:
            self._write(self._ready)
        empty = self.rows_frame(0, 0, pd.Series([], dtype=object) if self.keep_token_times else None)
        self._writer.close(with_constants(empty, self.constants))
        return self.rows_frame(0, self.ids.size, None)


def _list_array(views: list[np.ndarray]) -> pa.ListArray:
    """The float64 arrays `views` as one Arrow list array (int32 offsets, as pandas' conversion
    of the column gives; the file's item name is set by the writer's schema)."""
    offsets = np.zeros(len(views) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, views), np.int64, len(views)), out=offsets[1:])
    values = np.concatenate(views) if views else np.zeros(0)
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values, type=pa.float64()))


def join_step_files(files: RecordFiles, num_replicas: int) -> None:
    """The replicas' step files (`RecordFiles.step_spool`) joined into `files.steps_path` in
    replica order, the parts removed (nothing to do with one replica)."""
    if num_replicas == 1 or files.steps_path is None:
        return
    parts = [files.step_spool(i, num_replicas) for i in range(num_replicas)]
    try:
        concat_files(parts, files.steps_path)
    finally:
        for part in parts:
            part.unlink(missing_ok=True)


def write_frames(files: RecordFiles, requests: pd.DataFrame, steps: pd.DataFrame | None) -> None:
    """Write a run's frames built in memory (a run whose requests could not be streamed) to the
    files, with the constants as leading columns; `steps` None: no step file. The frames are
    not changed."""
    write_in_row_groups(with_constants(requests.copy(deep=False), files.constants), files.requests_path)
    if steps is not None and files.steps_path is not None:
        write_in_row_groups(with_constants(steps.copy(deep=False), files.constants), files.steps_path)


def remove_step_parts(files: RecordFiles, num_replicas: int) -> None:
    """Remove the replicas' step part files a failed run left (the caller removes its own files)."""
    if num_replicas > 1 and files.steps_path is not None:
        for i in range(num_replicas):
            files.step_spool(i, num_replicas).unlink(missing_ok=True)
