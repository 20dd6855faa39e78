"""An engine run's records: the simulator's request and step tables, plus executed plans and drafts.

Requests and steps use exactly the simulator's schema (`simulator.metrics.requests_frame`,
`simulator.step_log.StepLog`), so a run can be compared with a simulation of the same trace
column for column. The plan log keeps every executed `BatchPlan` with its outcome and measured
time, so a cost model can price exactly what ran (`read_plans`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from gpu_engine.engine import StepResult
from simulator.scheduler import BatchPlan, ScheduledSequence

DRAFT_COLUMNS = ("step", "request_id", "drafts_granted", "drafts_proposed", "drafts_accepted")


@dataclass
class EngineRun:
    """Records of one engine run (times in seconds on the run's clock).

    Attributes:
        requests: one row per request (`simulator.metrics.requests_frame`).
        steps: one row per step (`simulator.step_log.STEP_COLUMNS`).
        summary: `simulator.metrics.summarize` of the two.
        plans: one dict per step (`plan_record`).
        drafts: one row per sequence granted drafts in a step (`DRAFT_COLUMNS`).
        outputs: request id -> generated token ids.
    """

    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict
    plans: list[dict] = field(default_factory=list)
    drafts: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=DRAFT_COLUMNS))
    outputs: dict[int, list[int]] = field(default_factory=dict)

    def write(self, out_dir: str | Path) -> list[Path]:
        """Write requests.parquet, steps.parquet, drafts.parquet, plans.jsonl, outputs.jsonl and
        summary.json into `out_dir` (created); return the paths."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / name for name in ("requests.parquet", "steps.parquet", "drafts.parquet", "plans.jsonl",
                                         "outputs.jsonl", "summary.json")]
        self.requests.to_parquet(paths[0], index=False)
        self.steps.to_parquet(paths[1], index=False)
        self.drafts.to_parquet(paths[2], index=False)
        _write_jsonl(paths[3], self.plans)
        _write_jsonl(paths[4], ({"request_id": rid, "token_ids": ids} for rid, ids in sorted(self.outputs.items())))
        paths[5].write_text(json.dumps(self.summary, indent=2, default=float))
        return paths


def plan_record(step: int, start_s: float, duration_s: float, measured_s: float, plan: BatchPlan,
                result: StepResult, measured_cpu_s: float = float("nan"), host_probe_s: float = float("nan")) -> dict:
    """One plan-log entry: the plan (block tables copied), its outcome and timings (seconds).

    `duration_s` is the step's length on the run's clock; `measured_s` the wall time from
    `schedule()` to the sampled tokens and `measured_cpu_s` the serving thread's CPU time over
    the same span (`duration_s` is one of them, except under a `PricedClock` and with
    `cpu-normalized` timing, where it is measured_cpu_s × reference / `host_probe_s`, the host-speed
    probe's time when the step ran). A time not measured is null (JSON has no NaN).
    """
    sequences = [dict(s._asdict(), block_table=list(s.block_table)) for s in plan.sequences]
    return {
        "step": step, "start_s": start_s, "duration_s": duration_s, "measured_s": measured_s,
        "measured_cpu_s": _or_null(measured_cpu_s), "host_probe_s": _or_null(host_probe_s),
        "kv_blocks_used": plan.kv_blocks_used, "preempted_ids": list(plan.preempted_ids), "sequences": sequences,
        "tokens_emitted": list(result.outcome.tokens_emitted),
        "drafts_proposed": list(result.outcome.drafts_proposed), "drafts_accepted": list(result.drafts_accepted),
    }


def _or_null(seconds: float) -> float | None:
    return None if seconds != seconds else seconds  # NaN is the only value unequal to itself


def draft_rows(step: int, plan: BatchPlan, result: StepResult) -> list[tuple]:
    """`DRAFT_COLUMNS` rows for the sequences of `plan` that were granted drafts."""
    proposed = result.outcome.drafts_proposed
    return [(step, s.request_id, s.num_draft_tokens, proposed[i], result.drafts_accepted[i])
            for i, s in enumerate(plan.sequences) if s.num_draft_tokens]


def read_plans(path: str | Path) -> list[BatchPlan]:
    """The executed plans of a plans.jsonl, in step order, e.g. to price them with a cost model."""
    plans = []
    for line in Path(path).read_text().splitlines():
        entry = json.loads(line)
        sequences = tuple(ScheduledSequence(**dict(s, block_table=tuple(s["block_table"]))) for s in entry["sequences"])
        plans.append(BatchPlan(sequences, tuple(entry["preempted_ids"]), entry["kv_blocks_used"]))
    return plans


def _write_jsonl(path: Path, rows) -> None:
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
