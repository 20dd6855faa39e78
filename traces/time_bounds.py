"""The sane range of arrival times and rates, shared by the readers, generators and replay.

A value outside these bounds is not a workload but a typing or unit error (or an attack): it is
refused with the key or row named instead of being simulated. Without them an arrival of 1e308 s
leaves TTFT = E2E = 0 (1e308 + 0.5 == 1e308 in float64), two Azure timestamps 300 years apart
overflow int64 nanoseconds, and a rate of 1e-310 requests/s makes every arrival inf.
"""
from __future__ import annotations

import math

# Seconds a trace may span (first to last arrival): 31.7 years. The longest public traces span
# months (BurstGPT: 213 days = 1.8e7 s, Wang et al., arXiv 2401.17644), and float64 keeps 1.2e-7 s
# (0.12 us) of resolution up to 1e9 s, so TTFT/TBT in milliseconds stay exact to 1e-4 ms.
# Within 1e9 s of each other, two timestamps also differ by less than 2**63 ns (292 years).
MAX_SPAN_S = 1e9

# Seconds an arrival may read in the file, before it is re-based to the first arrival: 1e10 s
# (year 2286 as Unix epoch seconds), so epoch-second traces (1.7e9 s in 2024) load, and every
# value keeps 1.9e-6 s of float64 resolution.
MAX_ARRIVAL_S = 1e10

# Requests per second a generator may draw: above 1e6 the mean gap (1 us) is below the shortest
# engine step the cost models price, so the trace would be one burst however it is labelled; it
# also keeps qps * burstiness (gamma's rate parameter) far from float overflow.
MAX_QPS = 1e6

# Smallest gamma shape (vLLM's --burstiness γ; gap CV 1 / sqrt(γ) = 31.6 here). Below it float64
# draws collapse: at γ = 1e-6 nearly every gap is exactly 0 and a 20,000-request trace's mean rate
# is 3e-14 of the qps asked for (measured with numpy's Generator.gamma, seed 0).
MIN_BURSTINESS = 1e-3


def short_number(value: float) -> str:
    """A bound as a person writes it: 1e9 as "1e9", 0.001 as "0.001", 2147483647 in full."""
    exponent = round(math.log10(value)) if value > 0 else 0
    if exponent >= 6 and value == 10.0**exponent:
        return f"1e{exponent}"
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
