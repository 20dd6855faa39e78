"""Which term of TTFT is off: a recorded run's engine timestamps against the simulation, term by term.

vLLM's engine core stamps each request (`RequestStateStats`, vllm/v1/metrics/stats.py; the
`EngineCoreEventType.QUEUED` / `SCHEDULED` events of vllm/v1/engine/__init__.py, set by
`Scheduler.add_request` and `Scheduler.schedule`, and the `EngineCoreOutputs.timestamp` of the
output that carried its first token, read at vllm-project/vllm 00080ee, the 0.19 line):
`queued_ts`, `scheduled_ts`, `first_token_ts`. Their differences split the engine's TTFT in two,
and the simulator's records carry the same two (simulator/records.py):

- `queue_s`: queued_ts → scheduled_ts; simulated `first_scheduled_s − arrival_s` (waiting for
  the scheduler to take it: the queue, the token budget, `max_num_seqs`, the KV pool).
- `first_token_after_scheduled_s`: scheduled_ts → first_token_ts; simulated `schedule_wait_s`
  (the step in flight at the decision, with async scheduling) + `prefill_s` (the prompt's
  steps). The recording cannot tell those two apart, so they are reported as simulated only.

The front end (client send → queued_ts, first_token_ts → client) is not in the engine's stamps, and a
recording's client `arrival_time` is on another clock (module docstring of
`experiments.verification.recorded_run`), so a recorded run judges the engine's terms only.

Means add up (mean TTFT = mean queue + mean first token after scheduled, request by request), so
the difference of the means splits the TTFT error exactly between the two terms: the term with
the larger share of it is the one named off.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.metrics import percentile_stats

ENGINE_TERMS = ("queue_s", "first_token_after_scheduled_s")


def engine_intake_s(simulated: pd.DataFrame, steps: pd.DataFrame, lockstep: bool = False) -> np.ndarray:
    """When vLLM's engine core would take each simulated request in: its arrival if its replica was
    idle then, else the end of the step under way. vLLM stamps `queued_ts` there: the engine core's
    busy loop adds new requests between steps (`EngineCore.run_busy_loop` -> `_process_input_queue`
    -> `add_request` -> `Scheduler.add_request`, which records the QUEUED event; an idle core blocks on
    its input queue and takes a request at once; vllm/v1/engine/core.py, vllm/v1/core/sched/scheduler.py
    at vllm-project/vllm 00080ee). A recording's arrivals are those stamps, so a request replayed at
    its `queued_ts` that lands inside a simulated step was, on the real engine, taken in at a step
    boundary: measuring the simulated request from its intake compares like with like.

    Args:
        simulated: the requests frame (request_id, arrival_s, replica_id; first_scheduled_s and
            engine_arrival_s if there: behind a front end, the arrival the engine core sees).
        steps: the run's step table (replica_id, start_s, duration_s).
        lockstep: the replicas are MoE DP ranks stepped together (`simulator.data_parallel`): an
            idle rank runs the group's steps too (dummy batches), so every rank's intake follows
            the group's steps.

    A request is never taken in after its first scheduling (`first_scheduled_s`, where the frame
    has it): one that arrives as an idle replica starts a step with it in that step was taken in at
    its arrival, not at that step's end.

    Returns:
        one time (s) per request, in request_id order.
    """
    sim = simulated.sort_values("request_id", kind="stable")
    arrival = sim["arrival_s"].to_numpy(dtype=float)
    if "engine_arrival_s" in sim:  # behind a front end the engine core sees the request only then
        engine = sim["engine_arrival_s"].to_numpy(dtype=float)
        arrival = np.where(np.isfinite(engine), engine, arrival)
    intake = arrival.copy()
    groups = [(np.ones(len(sim), bool), steps)] if lockstep else \
        [(sim["replica_id"].to_numpy() == r, part) for r, part in steps.groupby("replica_id")]
    for mine, part in groups:
        order = np.argsort(part["start_s"].to_numpy(), kind="stable")
        starts = part["start_s"].to_numpy(dtype=float)[order]
        ends = starts + part["duration_s"].to_numpy(dtype=float)[order]
        if lockstep:  # every rank's row of one group step: the step once
            starts, first = np.unique(starts, return_index=True)
            ends = ends[first]
        under_way = np.searchsorted(starts, arrival[mine], side="right") - 1
        busy = (under_way >= 0) & (ends[np.maximum(under_way, 0)] > arrival[mine])
        intake[np.flatnonzero(mine)[busy]] = ends[under_way[busy]]
    if "first_scheduled_s" in sim:  # a request in the step that starts at its arrival was taken in then
        intake = np.fmin(intake, sim["first_scheduled_s"].to_numpy(dtype=float))
    return intake


def from_intake(simulated: pd.DataFrame, intake_s: np.ndarray) -> pd.DataFrame:
    """The requests frame with each request measured from its engine intake (`engine_intake_s`,
    request_id order): `arrival_s` the intake, `ttft_s`, `e2e_s` and `scheduling_delay_s` from it
    (the replayed arrival kept as `replayed_arrival_s`); sorted by request_id."""
    frame = simulated.sort_values("request_id", kind="stable").reset_index(drop=True)
    intake = np.asarray(intake_s, dtype=float)
    frame["replayed_arrival_s"] = frame["arrival_s"]
    frame["arrival_s"] = intake
    frame["ttft_s"] = frame["first_token_s"].to_numpy() - intake
    frame["e2e_s"] = frame["completion_s"].to_numpy() - intake
    frame["scheduling_delay_s"] = frame["first_scheduled_s"].to_numpy() - intake
    return frame


def with_latencies_of(summary: dict, frame: pd.DataFrame) -> dict:
    """`summary` with its TTFT, E2E and scheduling-delay statistics taken from `frame` (every
    request, as a recorded run's summary without trimming)."""
    out = dict(summary)
    for name in ("ttft_s", "e2e_s", "scheduling_delay_s"):
        out.update(percentile_stats(name, frame[name].to_numpy(dtype=float)))
    return out


def ttft_terms(measured: pd.DataFrame, simulated: pd.DataFrame, intake_s: np.ndarray | None = None,
               origin: str = "intake") -> pd.DataFrame:
    """Mean and P50 of TTFT and its two engine terms, measured and simulated, and each term's
    part of the difference of the mean TTFTs.

    Args:
        measured: a recording's requests (`RecordedRun.requests`: arrival_s, scheduled_s,
            first_token_s on the engine's clock).
        simulated: the simulation's requests frame (`arrival_s`, `first_scheduled_s`,
            `first_token_s`, `schedule_wait_s`), request i being the recording's request i.

    Returns:
        one row per metric (`ttft_s`, the two `ENGINE_TERMS`, then the simulated-only
        `schedule_wait_s` and `prefill_s`; with `intake_s` (`engine_intake_s`, request_id order)
        also `ttft_s from intake` and `queue_s from intake`, the simulated terms measured from the
        engine's intake instead of the replayed arrival; `origin` names another origin given as
        `intake_s`, e.g. "replayed arrival" for a frame already `from_intake`): measured and simulated mean and P50 (s), the
        difference of the means (ms) and its share of the TTFT difference (%; NaN for the
        simulated-only rows). Only requests with a first token on both sides are counted.

    Raises:
        ValueError: the two have different numbers of requests, or none has a first token on both.
    """
    if len(measured) != len(simulated):
        raise ValueError(f"the simulation has {len(simulated)} requests, the recording {len(measured)}")
    sim = simulated.sort_values("request_id", kind="stable").reset_index(drop=True)
    ok = (np.isfinite(measured["first_token_s"].to_numpy(dtype=float))
          & np.isfinite(sim["first_token_s"].to_numpy(dtype=float)))
    if not ok.any():
        raise ValueError("no request has a first token in both the recording and the simulation")
    m, s = measured[ok], sim[ok]
    measured_terms = {"ttft_s": m["first_token_s"] - m["arrival_s"], "queue_s": m["scheduled_s"] - m["arrival_s"],
                      "first_token_after_scheduled_s": m["first_token_s"] - m["scheduled_s"]}
    wait = s["schedule_wait_s"]
    after = s["first_token_s"] - s["first_scheduled_s"]
    simulated_terms = {"ttft_s": s["first_token_s"] - s["arrival_s"], "queue_s": s["first_scheduled_s"] - s["arrival_s"],
                       "first_token_after_scheduled_s": after, "schedule_wait_s": wait, "prefill_s": after - wait}
    if intake_s is not None:
        intake = pd.Series(np.asarray(intake_s, dtype=float)[ok], index=s.index)
        simulated_terms[f"ttft_s from {origin}"] = s["first_token_s"] - intake
        simulated_terms[f"queue_s from {origin}"] = s["first_scheduled_s"] - intake
        measured_terms[f"ttft_s from {origin}"] = measured_terms["ttft_s"]
        measured_terms[f"queue_s from {origin}"] = measured_terms["queue_s"]
    ttft_mean_s = measured_terms["ttft_s"].mean()
    rows = []
    for name, predicted in simulated_terms.items():
        actual = measured_terms.get(name)
        gap_s = predicted.mean() - actual.mean() if actual is not None else np.nan
        rows.append({"metric": name, "requests": int(ok.sum()),
                     "measured mean s": actual.mean() if actual is not None else np.nan,
                     "simulated mean s": predicted.mean(),
                     "measured P50 s": actual.median() if actual is not None else np.nan,
                     "simulated P50 s": predicted.median(),
                     "mean diff ms": 1e3 * gap_s,
                     "mean diff % of measured TTFT": 100.0 * gap_s / ttft_mean_s if ttft_mean_s else np.nan,
                     "term error %": 100.0 * gap_s / actual.mean() if actual is not None and actual.mean() else np.nan})
    return pd.DataFrame(rows)


def term_verdict(terms: pd.DataFrame) -> str:
    """One sentence naming the engine term that carries most of the mean TTFT error (`ttft_terms`'s
    table), with both terms' differences in ms."""
    rows = terms.set_index("metric")
    ttft = rows.loc["ttft_s"]
    gap_ms = ttft["mean diff ms"]
    pct = 100.0 * gap_ms / (1e3 * ttft["measured mean s"]) if ttft["measured mean s"] else np.nan
    parts = {name: rows.loc[name, "mean diff ms"] for name in ENGINE_TERMS}
    worst = max(parts, key=lambda name: abs(parts[name]))
    detail = ", ".join(f"{name} {value:+.1f} ms ({rows.loc[name, 'term error %']:+.1f} % of its own)"
                       for name, value in parts.items())
    text = (f"mean TTFT {gap_ms:+.1f} ms ({pct:+.1f} %) against the recording: {detail}; "
            f"the term off most is {worst}")
    for origin, said in (("intake", "the engine's intake (where vLLM stamps queued_ts)"),
                         ("replayed arrival", "the replayed arrival")):
        if f"ttft_s from {origin}" in rows.index:
            other = rows.loc[f"ttft_s from {origin}"]
            p50 = 100.0 * (other["simulated P50 s"] / other["measured P50 s"] - 1) if other["measured P50 s"] else np.nan
            text += f"; from {said}: TTFT P50 {p50:+.1f} %, mean {other['term error %']:+.1f} %"
    return text
