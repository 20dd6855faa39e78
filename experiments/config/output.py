"""`output:`: what each point keeps of its records, and which benchmark tools' metrics it adds."""
from __future__ import annotations

from pydantic import model_validator

from experiments.config.base import _Strict
from experiments.verification.client_metrics import TOOL_METRICS


class OutputConfig(_Strict):
    """What each point keeps of its records, for huge runs (simulator/records.py).

    `token_times: false` drops the per-token `token_times_s` column of requests.parquet (memory
    then no longer grows with output length; TBT/ITL percentiles come from a log-binned sketch
    within 0.1 %, simulator/records_sketch.py; the report has no TBT CDF). `steps: false` keeps no
    step rows, so no steps.parquet (the summary's step count and KV usage are still computed).
    `client_metrics: [vllm-bench, inference-perf, guidellm, aiperf]`: points.csv also gets each
    named tool's TTFT / ITL / TPOT / E2E by the tool's own definition (experiments/bench_tool_columns.py);
    it reads the token times, so it needs `token_times: true`. A capacity search's trials.csv keeps its own columns.

    Raises (as a config error naming the key): an unknown tool, a tool named twice, or client
    metrics with `token_times: false`."""

    token_times: bool = True
    steps: bool = True
    client_metrics: list[str] = []

    @model_validator(mode="after")
    def _check_client_metrics(self) -> "OutputConfig":
        for tool in self.client_metrics:
            if tool not in TOOL_METRICS:
                raise ValueError(f"output.client_metrics: unknown tool {tool!r}; valid: {', '.join(TOOL_METRICS)}")
        if len(set(self.client_metrics)) != len(self.client_metrics):
            raise ValueError(f"output.client_metrics names a tool twice: {self.client_metrics}")
        if self.client_metrics and not self.token_times:
            raise ValueError("output.client_metrics reads each request's token times: it needs "
                             "output.token_times: true")
        return self
