"""`slo:` and `goodput:`: latency targets, `<metric>_p<percentile>_s` (an SLO) or `<metric>_s`
(goodput's per-request thresholds), checked by `check_slo` / `check_goodput`."""
from __future__ import annotations

import re

from simulator.metrics import LATENCY_METRICS, PERCENTILES


_SLO_KEY = re.compile(r"^(?P<metric>[a-z_]+?)_p(?P<pct>\d+(?:\.\d+)?)_s$")


def slo_summary_key(slo_key: str) -> str:
    """'tbt_p99_s' -> the summary column 'tbt_s_p99'."""
    m = _SLO_KEY.match(slo_key)
    return f"{m['metric']}_s_p{float(m['pct']):g}"


def check_slo(slo: dict[str, float]) -> None:
    """ValueError unless every `slo:` key is `<metric>_p<percentile>_s` of a latency metric and a
    percentile the summary has, with a value > 0 seconds."""
    for key, value in slo.items():
        m = _SLO_KEY.match(key)
        metric = m and m["metric"] + "_s"
        if not m or metric not in LATENCY_METRICS or float(m["pct"]) not in PERCENTILES:
            raise ValueError(
                f"bad SLO key {key!r}: use <metric>_p<percentile>_s with metric in "
                f"{', '.join(x[:-2] for x in LATENCY_METRICS)} and percentile in "
                f"{', '.join(f'{p:g}' for p in PERCENTILES)} (e.g. tbt_p99_s)"
            )
        if value <= 0:
            raise ValueError(f"SLO {key} must be a finite number > 0 seconds, got {value}")


def check_goodput(goodput: dict[str, float]) -> None:
    """ValueError unless every `goodput:` key is ttft_s, tpot_s or e2e_s with a value > 0 seconds."""
    valid = {"ttft_s", "tpot_s", "e2e_s"}
    for key, value in goodput.items():
        if key not in valid:
            raise ValueError(f"bad goodput key {key!r}; valid: {', '.join(sorted(valid))}")
        if value <= 0:  # NaN and inf are refused before this (allow_inf_nan=False)
            raise ValueError(f"goodput {key} must be a finite number > 0 seconds, got {value}")
