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

ENGINE_TERMS = ("queue_s", "first_token_after_scheduled_s")


def ttft_terms(measured: pd.DataFrame, simulated: pd.DataFrame) -> pd.DataFrame:
    """Mean and P50 of TTFT and its two engine terms, measured and simulated, and each term's
    part of the difference of the mean TTFTs.

    Args:
        measured: a recording's requests (`RecordedRun.requests`: arrival_s, scheduled_s,
            first_token_s on the engine's clock).
        simulated: the simulation's requests frame (`arrival_s`, `first_scheduled_s`,
            `first_token_s`, `schedule_wait_s`), request i being the recording's request i.

    Returns:
        one row per metric (`ttft_s`, the two `ENGINE_TERMS`, then the simulated-only
        `schedule_wait_s` and `prefill_s`): measured and simulated mean and P50 (s), the
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
    return (f"mean TTFT {gap_ms:+.1f} ms ({pct:+.1f} %) against the recording: {detail}; "
            f"the term off most is {worst}")
