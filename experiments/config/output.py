"""`output:`: what each point keeps of its records."""
from __future__ import annotations

from experiments.config.base import _Strict


class OutputConfig(_Strict):
    """What each point keeps of its records, for huge runs (simulator/records.py).

    `token_times: false` drops the per-token `token_times_s` column of requests.parquet (memory
    then no longer grows with output length; TBT/ITL percentiles come from a log-binned sketch
    within 0.1 %, simulator/records_sketch.py; the report has no TBT CDF). `steps: false` keeps no
    step rows, so no steps.parquet (the summary's step count and KV usage are still computed)."""

    token_times: bool = True
    steps: bool = True
