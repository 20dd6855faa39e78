"""Per-request records kept compact as the run goes (DESIGN.md, "Records").

A finished request leaves the scheduler as a `FinishedRequest` holding a Python list of token
times (~32 bytes a token). A replica turns each into a row of typed columns (`RequestRecords`)
as it finishes, a few thousand at a time, and keeps its token times as int32 indices into the
replica's own array of step end times: every token time is the end of the step that emitted it
(`Scheduler.complete_step` / `advance_decodes` stamp the step's end), so one int32 per token
replaces a float, and the per-request lists are freed as soon as they are recorded. With
`keep_token_times=False` no per-token record is kept: the TBT/ITL samples go into a
`GapSketch` (simulator/records_sketch.py, 0.1 % bound) and memory no longer grows with output
length.

`requests_table` merges the replicas' records into the one requests frame (sorted by
request_id) column by column, converting the token step indices to times a chunk at a time
(each chunk freed as it is converted), so two full copies of the records never exist at once.
"""
from __future__ import annotations

import math
from itertools import chain
from operator import attrgetter

import numpy as np
import pandas as pd

from simulator.records_sketch import GapSketch, gaps_of_flat
from simulator.scheduler import FINISH_REASONS, FinishedRequest

# The scalar columns of FinishedRequest, in its field order, with their dtypes.
SCALAR_COLUMNS = {
    "request_id": np.int64, "arrival_s": np.float64, "prompt_tokens": np.int64, "output_tokens": np.int64,
    "finish_reason": np.int8, "generated_tokens": np.int64, "first_scheduled_s": np.float64,
    "first_token_s": np.float64, "completion_s": np.float64, "num_preemptions": np.int64,
    "recomputed_tokens": np.int64, "cached_tokens": np.int64, "resumed_cached_tokens": np.int64,
    "cpu_hit_tokens": np.int64, "kv_load_wait_s": np.float64,
    # Not a FinishedRequest field: the replica's note of each request's wait from its scheduling
    # decision to its first step's start (`RequestRecords.schedule_wait_s`).
    "schedule_wait_s": np.float64,
}
_FINISHED_FIELDS = tuple(name for name in SCALAR_COLUMNS if name != "schedule_wait_s")
_REASON_CODE = {reason: code for code, reason in enumerate(FINISH_REASONS)}
# Finished requests staged before they become typed rows. 256 (~50k tokens) keeps a flush's
# temporaries (~0.2-0.4 MB a column) reused from malloc's heap and the staged requests' token lists
# few: 4,096 (7 MB temporaries, fresh mmaps in a new process) faulted ~12,000 pages and cost
# 0.15-0.17 CPU-s in a new process against 0.10 (BENCHMARKS, seventh pass).
_FLUSH_REQUESTS = 256


class GrowableArray:
    """An append-only typed numpy buffer, for columns of unknown length.

    The buffer grows (by half) and is trimmed in place (`ndarray.resize`: `realloc`, which
    for large blocks remaps pages instead of copying), so a column of N values never needs 2N
    at once; where a view of it is still alive numpy refuses that and it is copied instead.
    """

    def __init__(self, dtype, capacity: int = 1024) -> None:
        self._buffer = np.empty(capacity, dtype=dtype)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def extend(self, values) -> None:
        values = np.asarray(values, dtype=self._buffer.dtype)
        end = self._size + values.size
        if end > self._buffer.size:
            self._resize(max(end, self._buffer.size + self._buffer.size // 2))
        self._buffer[self._size:end] = values
        self._size = end

    def _resize(self, capacity: int) -> None:
        try:
            self._buffer.resize(capacity, refcheck=True)
        except ValueError:  # a view of the buffer is alive: copy instead
            grown = np.empty(capacity, dtype=self._buffer.dtype)
            kept = min(capacity, self._size)
            grown[:kept] = self._buffer[:kept]
            self._buffer = grown

    def view(self) -> np.ndarray:
        """The values so far (a view: valid until the next `extend`)."""
        return self._buffer[:self._size]

    def release(self) -> np.ndarray:
        """The values as an array of their own (trimmed to size); the buffer is emptied."""
        if self._size < self._buffer.size:
            self._resize(self._size)
        out = self._buffer
        self._buffer, self._size = np.empty(0, dtype=out.dtype), 0
        return out


class ChunkedArray:
    """Append-only typed values in fixed-size chunks: growing never copies, and `drain` hands the
    chunks over one at a time, freeing each, so converting N values never holds two full copies."""

    def __init__(self, dtype, chunk_size: int = 1 << 22) -> None:
        self.dtype, self.chunk_size = np.dtype(dtype), chunk_size
        self._chunks: list[np.ndarray] = []
        self._fill = chunk_size  # values in the last chunk (a full one starts the next)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def extend(self, values) -> None:
        values = np.asarray(values, dtype=self.dtype)
        done = 0
        while done < values.size:
            if self._fill == self.chunk_size:
                self._chunks.append(np.empty(self.chunk_size, dtype=self.dtype))
                self._fill = 0
            take = min(self.chunk_size - self._fill, values.size - done)
            self._chunks[-1][self._fill:self._fill + take] = values[done:done + take]
            self._fill += take
            done += take
        self._size += values.size

    def drain(self):
        """Yield the values chunk by chunk, in order, dropping each chunk from the array."""
        while self._chunks:
            chunk = self._chunks.pop(0)
            yield chunk if self._chunks else chunk[:self._fill]
        self._fill, self._size = self.chunk_size, 0


class RequestRecords:
    """The finished requests of one replica, as typed columns.

    Args:
        replica_id: written into every row's `replica_id`.
        keep_token_times: keep each request's token times (int32 step indices, 4 bytes a
            token); False keeps only `gap_sketch`.
        sketch_window_s: (first, last) arrival times whose requests enter the sketch (the
            trimmed measurement window); used only without token times.

        stream: a `simulator.records_stream.RequestsStream` that the finished requests' rows
            go to (a run writing its records to Parquet as it goes) instead of being kept here;
            only the sketch (without token times) is still kept here.

    The owner stamps every step end with `note_step_end(s)` before `add`-ing the requests that
    step finished.
    """

    def __init__(self, replica_id: int = 0, keep_token_times: bool = True,
                 sketch_window_s: tuple[float, float] = (-math.inf, math.inf), stream=None) -> None:
        self.replica_id = replica_id
        self.keep_token_times = keep_token_times
        self.sketch_window_s = sketch_window_s
        self.stream = stream
        self._streamed = 0  # rows handed to the stream
        self.gap_sketch = None if keep_token_times else GapSketch()
        self.step_end_s = GrowableArray(np.float64)
        self.columns = {name: GrowableArray(dtype) for name, dtype in SCALAR_COLUMNS.items()}
        self.tpot_s = GrowableArray(np.float64)
        self.token_steps = ChunkedArray(np.int32)  # index into step_end_s of each token, request by request
        self.token_counts = GrowableArray(np.int64)  # tokens recorded per request
        self._pending: list[FinishedRequest] = []
        self._pending_ends_s: list[float] = []  # step ends not yet in step_end_s (one extend per flush)
        # request id -> seconds from its scheduling decision (`first_scheduled_s`) to the start of
        # its first step, where they differ (async scheduling: the step in flight at the decision);
        # noted by the replica (`Replica._note_schedule_wait`), taken out as the request is recorded.
        self.schedule_wait_s: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self.tpot_s) + self._streamed + len(self._pending)

    def note_step_end(self, end_s: float) -> None:
        """A step ended at `end_s` (seconds; non-decreasing)."""
        if self.keep_token_times and self.stream is None:
            self._pending_ends_s.append(end_s)

    def note_step_ends(self, ends_s: list[float]) -> None:
        """Steps ended at these times (a decode window's)."""
        if self.keep_token_times and self.stream is None:
            self._pending_ends_s.extend(ends_s)

    def add(self, finished: list[FinishedRequest]) -> None:
        """Record finished (or rejected) requests; their token times must be step ends noted."""
        self._pending.extend(finished)
        if len(self._pending) >= _FLUSH_REQUESTS:
            self.flush()

    def flush(self) -> None:
        """Turn the staged requests into typed rows (and drop their token lists)."""
        if self._pending_ends_s:
            self.step_end_s.extend(self._pending_ends_s)
            self._pending_ends_s = []
        pending, self._pending = self._pending, []
        if not pending:
            return
        lists = [f.token_times_s for f in pending]
        lengths = np.fromiter(map(len, lists), np.int64, len(lists))
        times = np.fromiter(chain.from_iterable(lists), np.float64, int(lengths.sum()))
        tpot = _tpot_s(times, lengths)
        columns = _scalar_columns(pending, self.schedule_wait_s)
        if self.stream is not None:
            self.stream.add(self.replica_id, columns, tpot,
                            times if self.keep_token_times else None, lengths)
            self._streamed += len(pending)
            if not self.keep_token_times:
                self._add_to_sketch(pending, times, lengths)
            return
        for name, values in columns.items():
            self.columns[name].extend(values)
        self.tpot_s.extend(tpot)
        if self.keep_token_times:
            self.token_counts.extend(lengths)
            self._add_token_steps(times, lengths)
        else:
            self._add_to_sketch(pending, times, lengths)

    def _add_token_steps(self, times: np.ndarray, lengths: np.ndarray) -> None:
        """Each token's index into `step_end_s`. A running request gets a token every step, so
        each request's first token is looked up (binary search) and the rest are guessed at the
        steps after it; only the tokens where the guess is not their time (a speculative
        emission, a preemption, a prefill paused between chunks) are looked up one by one.
        The guess is checked token by token, so the times are exactly those of the steps."""
        ends = self.step_end_s.view()
        if not times.size:
            return
        starts = np.cumsum(lengths) - lengths
        emitted = lengths > 0
        first = np.searchsorted(ends, times[starts[emitted]])
        # int32 as stored (`token_steps`): half the memory traffic of the 4-byte-a-token passes
        index = np.int32 if max(times.size, ends.size) < 2**31 else np.int64
        steps = np.repeat((first - starts[emitted]).astype(index), lengths[emitted])
        steps += np.arange(times.size, dtype=index)
        np.minimum(steps, ends.size - 1, out=steps)
        missed = np.flatnonzero(ends[steps] != times)
        if missed.size:
            looked_up = np.searchsorted(ends, times[missed])
            if looked_up.max() >= ends.size or not np.array_equal(ends[looked_up], times[missed]):
                raise RuntimeError(f"replica {self.replica_id}: a token time is not the end of a step noted "
                                   "before it finished (RequestRecords.note_step_end): records would be wrong")
            steps[missed] = looked_up
        self.token_steps.extend(steps)

    def _add_to_sketch(self, pending: list[FinishedRequest], times: np.ndarray, lengths: np.ndarray) -> None:
        first, last = self.sketch_window_s
        keep = np.fromiter((first <= f.arrival_s <= last for f in pending), bool, len(pending))
        token_keep = np.repeat(keep, lengths)
        tbt, tokens, _ = gaps_of_flat(times[token_keep], lengths[keep])
        self.gap_sketch.add(tbt, tokens)


def requests_table(records: list[RequestRecords], frontend=None) -> pd.DataFrame:
    """The requests frame of a run (`simulator.metrics.requests_frame`'s columns, sorted by
    request_id, plus `replica_id`): `token_times_s` holds one float64 array per request (views
    into one flat array) when the records kept token times, and is absent otherwise. With a
    `frontend` (`simulator.frontend.FrontEnd`), the client-side and engine-side terms
    (`records_frame`).

    The records are emptied as their columns move into the frame, column by column, so the
    frame and the records never both hold everything.
    """
    for r in records:
        r.flush()
    rows = [len(r.tpot_s) for r in records]
    order = np.argsort(np.concatenate([r.columns["request_id"].view() for r in records]), kind="stable")
    columns = {name: np.concatenate([r.columns[name].release() for r in records])[order] for name in SCALAR_COLUMNS}
    tokens = _token_times_column(records, order) if all(r.keep_token_times for r in records) else None
    return records_frame(columns, np.concatenate([r.tpot_s.release() for r in records])[order],
                         np.repeat(np.array([r.replica_id for r in records], dtype=np.int64), rows)[order], tokens,
                         frontend)


def records_frame(columns: dict[str, np.ndarray], tpot_s: np.ndarray, replica_id: np.ndarray,
                  token_times: pd.Series | None, frontend=None) -> pd.DataFrame:
    """The requests frame of rows given as arrays (`SCALAR_COLUMNS`, `finish_reason` as codes
    into `FINISH_REASONS`; all of one length), in the order `requests_table` gives its columns:
    the scalars, `token_times_s` (when given), ttft_s, e2e_s, scheduling_delay_s, tpot_s,
    replica_id. Shared by the frame built at the end and each row group a run writes as it goes
    (`simulator.records_stream`), so the two are the same.

    With a `frontend` (`simulator.frontend.FrontEnd`: the run modelled vLLM's API server),
    `arrival_s` is when the client sent the request and the engine's times (`first_scheduled_s`,
    `first_token_s`, `completion_s`, `token_times_s`) are on the engine's clock; then `ttft_s` and
    `e2e_s` are what the client sees (plus `frontend_in_s` before the engine and `frontend_out_s`
    after it), and the frame adds the terms of TTFT one by one: `engine_arrival_s`, `frontend_in_s`,
    `queue_s` (engine arrival to the scheduling decision that admitted it), `engine_first_token_s`
    (that decision to the first token leaving the engine: with async scheduling the step already
    in flight, then the prompt's steps) = `schedule_wait_s` (the decision to the start of the
    request's first step: the step in flight at the decision with async scheduling, 0 in a
    synchronous engine, where vLLM decides as the step starts) + `prefill_s` (that start to the end
    of the step that emits the first token: the prompt's chunks and any step between them),
    `frontend_out_s`; and `engine_ttft_s`, `engine_e2e_s` (what vLLM's engine-core timestamps give:
    `first_token_ts` / `last_token_ts` − `queued_ts`). So `ttft_s` = frontend_in_s + queue_s +
    schedule_wait_s + prefill_s + frontend_out_s. The engine core's own output processing
    (`Scheduler.update_from_output`, the sampled token's copy to the host) is inside a step's
    time in a synchronous engine (its host time) and overlaps the next step with async
    scheduling; the API server's (detokenization, streaming) is `frontend_out_s`.
    `scheduling_delay_s` is `queue_s`. SLOs read `ttft_s` / `e2e_s`: the client's.
    Without a front end `schedule_wait_s` is a scalar column as well (0 in a synchronous engine)."""
    frame = pd.DataFrame(index=pd.RangeIndex(tpot_s.size))
    for name in SCALAR_COLUMNS:
        if name == "finish_reason":
            frame[name] = pd.Series(np.asarray(FINISH_REASONS, dtype=object)[columns[name]]).astype(str)
        else:
            frame[name] = columns[name]
    if token_times is not None:
        frame["token_times_s"] = token_times
    if frontend is None:
        frame["ttft_s"] = frame["first_token_s"] - frame["arrival_s"]
        frame["e2e_s"] = frame["completion_s"] - frame["arrival_s"]
        frame["scheduling_delay_s"] = frame["first_scheduled_s"] - frame["arrival_s"]
    else:
        _client_and_engine_terms(frame, frontend)
    frame["tpot_s"] = tpot_s
    frame["replica_id"] = replica_id
    return frame


def _client_and_engine_terms(frame: pd.DataFrame, frontend) -> None:
    """`records_frame`'s columns of a run behind a front end (its docstring), in place."""
    arrival = frame["arrival_s"].to_numpy()
    fe_in = frontend.in_s(frame["prompt_tokens"].to_numpy().astype(np.float64))
    engine_arrival = arrival + fe_in  # as the dispatcher computed it (`simulator.frontend.engine_arrival_s`)
    out_s = frontend.output_s
    first_token, completion = frame["first_token_s"].to_numpy(), frame["completion_s"].to_numpy()
    frame["ttft_s"] = first_token + out_s - arrival
    frame["e2e_s"] = completion + out_s - arrival
    frame["scheduling_delay_s"] = frame["first_scheduled_s"].to_numpy() - engine_arrival
    frame["engine_arrival_s"] = engine_arrival
    frame["frontend_in_s"] = fe_in
    frame["queue_s"] = frame["scheduling_delay_s"]
    frame["engine_first_token_s"] = first_token - frame["first_scheduled_s"].to_numpy()
    frame["prefill_s"] = frame["engine_first_token_s"].to_numpy() - frame["schedule_wait_s"].to_numpy()
    frame["frontend_out_s"] = np.where(np.isnan(first_token), np.nan, out_s)
    frame["engine_ttft_s"] = first_token - engine_arrival
    frame["engine_e2e_s"] = completion - engine_arrival


def _scalar_columns(finished: list[FinishedRequest], schedule_wait_s: dict[int, float]) -> dict[str, np.ndarray]:
    """The `SCALAR_COLUMNS` of `finished`, one typed array each (finish_reason as codes);
    `schedule_wait_s` from the replica's notes (popped), 0 where none was noted (the decision was
    the first step's start) and NaN for a request never scheduled."""
    n = len(finished)
    columns = {name: np.fromiter(map(_REASON_CODE.__getitem__, map(attrgetter(name), finished))
                                 if name == "finish_reason" else map(attrgetter(name), finished),
                                 SCALAR_COLUMNS[name], n)
               for name in _FINISHED_FIELDS}
    wait = (np.fromiter((schedule_wait_s.pop(f.request_id, 0.0) for f in finished), np.float64, n)
            if schedule_wait_s else np.zeros(n))
    wait[np.isnan(columns["first_scheduled_s"])] = math.nan
    columns["schedule_wait_s"] = wait
    return columns


def _tpot_s(times: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Each request's TPOT from its tokens (`times`: the requests' token times one after another,
    `lengths` of them each), exactly as `simulator.metrics.tpot_s`: (last − first) / (n − 1),
    NaN for n <= 1 (the same float operations, so the same values)."""
    tpot = np.full(lengths.size, math.nan)
    several = np.flatnonzero(lengths > 1)
    last = np.cumsum(lengths)[several] - 1
    first = last - (lengths[several] - 1)
    tpot[several] = (times[last] - times[first]) / (lengths[several] - 1)
    return tpot


def _token_times_column(records: list[RequestRecords], order: np.ndarray) -> pd.Series:
    """One float64 array per request, in `order`: views into one flat array of every token's
    time in record order, converted from the int32 step indices a chunk at a time (each chunk
    freed as it is converted), so the indices and the times never both exist in full."""
    lengths = np.concatenate([r.token_counts.release() for r in records])
    flat = np.empty(int(lengths.sum()), dtype=np.float64)
    position = 0
    for r in records:
        ends = r.step_end_s.release()
        for chunk in r.token_steps.drain():
            # Gathered straight into `flat` (a fancy index would first build a chunk-sized
            # temporary: 32 MB of fresh pages for 4M tokens). 'clip' only skips numpy's buffered
            # bounds check: every index was checked against these ends as it was recorded
            # (`_add_token_steps`), so none is clipped.
            np.take(ends, chunk, out=flat[position:position + chunk.size], mode="clip")
            position += chunk.size
    views = request_views(flat, lengths)
    return pd.Series([views[i] for i in order.tolist()], dtype=object)


def request_views(flat: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """`flat` (requests' values one after another, `lengths` of them each) cut into one view
    per request, in order: `np.split`'s arrays by plain slices (a third of its time)."""
    stops = np.cumsum(lengths).tolist()
    return [flat[a:b] for a, b in zip([0] + stops[:-1], stops)]
