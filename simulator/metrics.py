"""Request and latency metrics, defined as `vllm bench serve` and Sarathi-Serve define them.

TTFT = first token − arrival. TPOT = (last − first) / (n − 1) over the n tokens actually produced,
undefined (NaN) for n <= 1. TBT = the gap between consecutive emissions after the first token, one
sample per emitting step (a speculative emission of k tokens is one sample). ITL per token = each
gap divided by the k tokens it delivered, repeated k times (its mean equals TPOT). E2E =
completion − arrival. Scheduling delay = first scheduled − arrival. (DESIGN.md, "Metrics";
REFERENCE.md §1.6, §2.5.) Every percentile of an empty sample is NaN, never missing.
"""
from __future__ import annotations

import operator
from itertools import chain

import numpy as np
import pandas as pd

from simulator.records import RequestRecords, requests_table
from simulator.records_parquet import ParquetTokenTimes, SeriesTokenTimes
from simulator.records_percentiles import percentiles_of_sorted, streamed_percentiles_of
from simulator.records_sketch import GapSketch, gaps_of_flat
from simulator.scheduler import COMPLETED, FINISH_REASONS, FinishedRequest
from simulator.step_log import StepStats

PERCENTILES = (50, 90, 95, 99, 99.9)
LATENCY_METRICS = ("ttft_s", "tbt_s", "itl_s", "tpot_s", "e2e_s", "scheduling_delay_s")
# Engine-side latencies of a run behind a serving front end (`ttft_s` / `e2e_s` are then the
# client's, what SLOs read; these are what vLLM's engine-core timestamps measure).
ENGINE_SIDE_METRICS = ("engine_ttft_s", "engine_e2e_s")


def emissions(token_times_s) -> tuple[np.ndarray, np.ndarray]:
    """Split per-token times into emissions.

    Args:
        token_times_s: one time per produced token, non-decreasing; an emission of k tokens
            repeats its time k times.

    Returns:
        (emission_times_s, tokens_per_emission), both shape (num_emissions,).
    """
    times = np.asarray(token_times_s, dtype=float)
    if times.size == 0:
        return times, np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, np.diff(times) != 0])
    counts = np.diff(np.r_[starts, times.size])
    return times[starts], counts


def tbt_samples_s(token_times_s) -> np.ndarray:
    """Gaps between consecutive emissions after the first token (seconds)."""
    times, _ = emissions(token_times_s)
    return np.diff(times)


def itl_samples_s(token_times_s) -> np.ndarray:
    """Per-token inter-token latency: each emission gap / its k tokens, repeated k times."""
    times, counts = emissions(token_times_s)
    gaps = np.diff(times)
    return np.repeat(gaps / counts[1:], counts[1:])


def gap_samples_s(token_times_per_request) -> tuple[np.ndarray, np.ndarray]:
    """TBT and ITL samples of many requests at once: the concatenation of `tbt_samples_s` and of
    `itl_samples_s` over the requests, in order, with a few numpy passes over all their tokens
    instead of several calls per request (a run has ~20k requests and millions of tokens).

    Args:
        token_times_per_request: iterable of per-token time sequences (as `emissions` takes).

    Returns:
        (tbt_s, itl_s): float64 arrays.
    """
    lists = list(token_times_per_request)
    if len(lists) > _GAP_CHUNK_REQUESTS:  # bounded temporaries: a run holds millions of tokens
        parts = [gap_samples_s(lists[i:i + _GAP_CHUNK_REQUESTS]) for i in range(0, len(lists), _GAP_CHUNK_REQUESTS)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    lengths = np.fromiter((len(t) for t in lists), np.int64, len(lists))
    times = np.fromiter(chain.from_iterable(lists), np.float64, int(lengths.sum()))
    tbt, _, itl = gaps_of_flat(times, lengths)
    return tbt, itl


_GAP_CHUNK_REQUESTS = 2048


def tpot_s(token_times_s) -> float:
    """(last − first) / (n − 1) over the n tokens produced; NaN when n <= 1."""
    n = len(token_times_s)
    if n <= 1:
        return float("nan")
    return (token_times_s[-1] - token_times_s[0]) / (n - 1)


def requests_frame(finished: list[FinishedRequest]) -> pd.DataFrame:
    """One row per request (DESIGN.md "Records") plus derived ttft_s, tpot_s, e2e_s, scheduling_delay_s.

    Sorted by request_id. `token_times_s` holds one float64 array per request (Parquet stores
    it as a list). The simulator builds the same frame from compact records as it runs
    (`simulator.records.requests_table`, which adds `replica_id`); this is the path for a list
    of records (the engine's).
    """
    records = RequestRecords()
    times = [t for f in finished for t in f.token_times_s]
    records.note_step_ends(np.unique(np.asarray(times, dtype=np.float64)))  # every token time, as "step ends"
    records.add(finished)
    return requests_table([records]).drop(columns="replica_id")


def percentile_stats(name: str, values: np.ndarray, scratch: bool = False) -> dict[str, float]:
    """{name}_mean and {name}_p50 … _p99.9 of the non-NaN values; NaN for an empty sample.

    `scratch`: `values` is the caller's own array, which may be left reordered: it is sorted in
    place instead of copied and partially sorted, and the percentiles read from it
    (`records_percentiles.percentiles_of_sorted`: numpy's interpolation, the same floats; numpy's
    vectorised sort of 4M samples takes half the time of its 12-rank partition). The order
    statistics do not depend on how the array was ordered, except for the sign of a zero among
    +0.0 and -0.0, so an array with a sign bit set goes through `numpy.percentile` (in place).
    The mean is taken before, over the values in their order (the same float sum)."""
    values = np.asarray(values, dtype=float)
    nan = np.isnan(values)
    if nan.any():  # a copy without them (then ours to reorder); none: the samples as they are
        values, scratch = values[~nan], True
    del nan
    out = {f"{name}_mean": float(values.mean()) if values.size else float("nan")}
    if not values.size:
        found = [float("nan")] * len(PERCENTILES)
    elif scratch and not np.signbit(values).any():
        values.sort()
        found = percentiles_of_sorted(values, PERCENTILES)
    else:  # one call for every percentile: one partial sort of the (millions of) samples, not five
        found = np.percentile(values, PERCENTILES, overwrite_input=scratch).tolist()
    for p, value in zip(PERCENTILES, found):
        out[f"{name}_p{p:g}"] = float(value)
    return out


def summarize(requests: pd.DataFrame, steps: pd.DataFrame | StepStats, num_gpu_blocks: int,
              trim_fraction: float = 0.0, gaps: GapSketch | None = None,
              token_times: ParquetTokenTimes | None = None) -> dict[str, float]:
    """Summary of a run: counts by finish reason, throughput, latency percentiles, KV usage.

    Throughput is over the makespan (first arrival to last completion) and counts tokens actually
    produced, so a truncated request counts the tokens it produced. Latencies use every request
    that produced tokens (completed or truncated); rejected requests have no times.

    Args:
        trim_fraction: latency percentiles skip requests arriving in the first and last
            `trim_fraction` of the arrival span (warm-up, when the system fills, and drain, when it
            empties); counts and throughput keep every request. 0 keeps all.
        steps: the step table, or only its `StepStats` when the table was not kept.
        gaps: the run's TBT/ITL sketch (already trimmed), needed when `requests` has no
            `token_times_s` column (`output.token_times: false`); its percentiles are within
            0.1 % (simulator/records_sketch.py). With token times, every percentile is exact
            (`numpy.percentile`; past `_IN_MEMORY_TOKENS` tokens streamed in chunks,
            simulator/records_percentiles.py, with the same result).
        token_times: where the token times are when `requests` has no `token_times_s` column
            but the run wrote them (its requests file, rows in `requests`' order): read back in
            the same chunks, so the percentiles and means are those of the frame.

    Returns:
        A flat dict of floats/ints; every key is always present (NaN where undefined).

    Raises:
        ValueError: no token times and no sketch.
    """
    completed = int((requests["finish_reason"] == COMPLETED).sum())
    scalars = requests.drop(columns="token_times_s", errors="ignore")  # never copy the token column
    done_mask = scalars["generated_tokens"].to_numpy() > 0
    done = scalars[done_mask]
    out: dict[str, float] = {"num_requests": len(requests), "completed": completed}
    for reason in FINISH_REASONS[1:]:
        out[reason] = int((requests["finish_reason"] == reason).sum())
    out["rejected"] = sum(out[r] for r in FINISH_REASONS if r.startswith("rejected"))

    makespan_s = float(done["completion_s"].max() - requests["arrival_s"].min()) if len(done) else 0.0
    output_tokens = int(done["generated_tokens"].sum())
    out["makespan_s"] = makespan_s
    out["throughput_rps"] = completed / makespan_s if makespan_s > 0 else 0.0
    out["output_throughput_tps"] = output_tokens / makespan_s if makespan_s > 0 else 0.0
    total_tokens = output_tokens + int(done["prompt_tokens"].sum())
    out["total_throughput_tps"] = total_tokens / makespan_s if makespan_s > 0 else 0.0

    if trim_fraction > 0 and len(done):
        first, last = requests["arrival_s"].min(), requests["arrival_s"].max()
        margin = trim_fraction * (last - first)
        arrivals = scalars["arrival_s"].to_numpy()
        done_mask &= (arrivals >= first + margin) & (arrivals <= last - margin)
        done = scalars[done_mask]
    out["num_measured"] = len(done)
    if "token_times_s" in requests or token_times is not None:
        source = SeriesTokenTimes(requests["token_times_s"]) if "token_times_s" in requests else token_times
        gap_stats = _gap_stats(source, done_mask, int(done["generated_tokens"].sum()))
    elif gaps is not None:
        gap_stats = {}
        for name in ("tbt_s", "itl_s"):
            _, mean, values = gaps.stats(name, PERCENTILES)
            gap_stats.update(_stats_dict(name, mean, values))
    else:
        raise ValueError("summarize: the requests have no token_times_s column and no TBT/ITL sketch was "
                         "given (gaps=): the TBT and ITL percentiles cannot be computed")
    for name in LATENCY_METRICS:
        if name in ("tbt_s", "itl_s"):
            out.update({k: v for k, v in gap_stats.items() if k.startswith(name)})
        else:
            out.update(percentile_stats(name, done[name].to_numpy()))

    for name in ENGINE_SIDE_METRICS:  # a run behind a front end (`simulator.records.records_frame`)
        if name in done:
            out.update(percentile_stats(name, done[name].to_numpy()))

    out["num_preemptions"] = int(requests["num_preemptions"].sum())
    out["recomputed_tokens"] = int(requests["recomputed_tokens"].sum())
    out.update(prefix_cache_stats(requests))
    if isinstance(steps, StepStats):  # the table was not kept: mean of the integer sum, exact to rounding
        out["num_steps"] = steps.num_steps
        if steps.num_steps:
            out["kv_usage_mean"] = steps.kv_blocks_used_sum / steps.num_steps / num_gpu_blocks
            out["kv_usage_max"] = steps.kv_blocks_used_max / num_gpu_blocks
        else:
            out["kv_usage_mean"] = out["kv_usage_max"] = float("nan")
        return out
    out["num_steps"] = len(steps)
    if len(steps):
        usage = steps["kv_blocks_used"].to_numpy() / num_gpu_blocks
        out["kv_usage_mean"] = float(usage.mean())
        out["kv_usage_max"] = float(usage.max())
    else:
        out["kv_usage_mean"] = out["kv_usage_max"] = float("nan")
    return out


# Token times of the measured requests up to which TBT/ITL samples are held at once (and
# percentiles taken by numpy on them); beyond, they are streamed (same values, bounded memory).
_IN_MEMORY_TOKENS = 1 << 22


def _gap_stats(token_times: SeriesTokenTimes | ParquetTokenTimes, mask: np.ndarray,
               num_tokens: int) -> dict[str, float]:
    """tbt_s_* and itl_s_* of the requests `mask` selects, from their token times."""
    rows = np.flatnonzero(mask)

    def chunks():
        for flat, lengths in token_times.chunks(rows, _GAP_CHUNK_REQUESTS):
            tbt, _, itl = gaps_of_flat(flat, lengths)
            yield tbt, itl

    out: dict[str, float] = {}
    if num_tokens <= _IN_MEMORY_TOKENS:
        tbt_parts, itl_parts = [], []
        for tbt, itl in chunks():
            tbt_parts.append(tbt)
            itl_parts.append(itl)
        # Without multi-token emissions `gaps_of_flat` hands back the TBT gaps as the ITL
        # samples themselves: the same array, so the same statistics (one partial sort, not two).
        same = all(map(operator.is_, tbt_parts, itl_parts))
        for name, parts in (("tbt_s", tbt_parts), ("itl_s", itl_parts)):
            if same and name == "itl_s":
                out.update({f"itl_s{key[len('tbt_s'):]}": value for key, value in out.items()})
                break
            values = np.concatenate(parts) if parts else np.zeros(0)
            parts.clear()  # one copy of the samples at a time
            out.update(percentile_stats(name, values, scratch=True))  # ours: sorted in place
        return out
    for name, (_, mean, values) in zip(("tbt_s", "itl_s"), streamed_percentiles_of(chunks, 2, PERCENTILES)):
        out.update(_stats_dict(name, mean, values))
    return out


def _stats_dict(name: str, mean: float, values: list[float]) -> dict[str, float]:
    """{name}_mean and {name}_p50 … as `percentile_stats` names them."""
    return {f"{name}_mean": float(mean), **{f"{name}_p{p:g}": float(v) for p, v in zip(PERCENTILES, values)}}


def prefix_cache_stats(requests: pd.DataFrame) -> dict[str, float]:
    """Prefix-cache counters of a run, as vLLM's `vllm:prefix_cache_queries` / `_hits` count them
    (`vllm/v1/metrics/stats.py` `PrefixCacheStats.record`, non-preempted requests): every
    request served queries its prompt tokens once, at its first admission, and hits
    `cached_tokens` of them. Lookups after a recompute preemption are counted apart, as vLLM's
    `preempted_hits`. Rejected requests query nothing.

    Returns:
        prefix_cache_queries_tokens, prefix_cache_hits_tokens (the cached prompt tokens, not
        computed), prefix_cache_hit_rate (hits / queries, NaN with no query) and
        preempted_cache_hits_tokens (hits on re-admission; the tokens recomputed after
        preemptions are `recomputed_tokens`). Without prefix caching the hits are 0.
    """
    served = requests[requests["first_scheduled_s"].notna()]
    queries = int(served["prompt_tokens"].sum())
    hits = int(served["cached_tokens"].sum()) if "cached_tokens" in served else 0
    resumed = int(served["resumed_cached_tokens"].sum()) if "resumed_cached_tokens" in served else 0
    return {
        "prefix_cache_queries_tokens": queries,
        "prefix_cache_hits_tokens": hits,
        "prefix_cache_hit_rate": hits / queries if queries else float("nan"),
        "preempted_cache_hits_tokens": resumed,
    }


def kv_offload_stats(requests: pd.DataFrame, tiers: list) -> dict[str, float]:
    """KV offload counters of a run (`simulator.scheduler.kv_offload`): tokens loaded from the
    CPU tier (every admission, first or after a preemption), their share of the prompt tokens
    queried (`prefix_cache_stats`' denominator), bytes moved each way over the host link (one
    rank's shard per block, summed over replicas), and the time requests waited for their loads
    (mean and P99 over the requests that loaded, and their count).

    Args:
        requests: the requests frame (`cpu_hit_tokens`, `kv_load_wait_s` columns).
        tiers: each replica's `KvOffload`.
    """
    served = requests[requests["first_scheduled_s"].notna()]
    queries = int(served["prompt_tokens"].sum())
    hits = int(served["cpu_hit_tokens"].sum())
    waits = served.loc[served["cpu_hit_tokens"] > 0, "kv_load_wait_s"].to_numpy()
    return {
        "kv_offload_cpu_blocks": sum(t.cpu.num_blocks for t in tiers),
        "kv_offload_cpu_hits_tokens": hits,
        "kv_offload_cpu_hit_rate": hits / queries if queries else float("nan"),
        "kv_offload_load_bytes": sum(t.stats.load_bytes for t in tiers),
        "kv_offload_store_bytes": sum(t.stats.store_bytes for t in tiers),
        "kv_offload_loading_requests": len(waits),
        "kv_load_wait_s_mean": float(waits.mean()) if len(waits) else float("nan"),
        "kv_load_wait_s_p99": float(np.percentile(waits, 99)) if len(waits) else float("nan"),
    }


def goodput_count(requests: pd.DataFrame, thresholds_s: dict[str, float]) -> int:
    """Completed requests meeting every per-request threshold (`vllm bench serve --goodput`, DistServe).

    Args:
        requests: `requests_frame` output.
        thresholds_s: any of ttft_s, tpot_s, e2e_s -> limit in seconds. A request with an
            undefined TPOT (one output token) meets a TPOT threshold, as vLLM skips it.
    """
    good = requests["finish_reason"] == COMPLETED
    for metric, limit in thresholds_s.items():
        values = requests[metric]
        good &= (values <= limit) | (values.isna() & (metric == "tpot_s"))
    return int(good.sum())
