"""What arrives: `Request`, trace-file readers, arrival processes, length distributions, profiles.

Per-format readers live in `traces.readers`, open-loop arrival processes in `traces.arrivals`,
length distributions in `traces.length_distributions`, transformations of a recorded trace in
`traces.replay`, the closed-loop workload in `traces.closed_loop`.
"""
from traces.arrivals import ARRIVAL_PROCESSES, arrival_times_s
from traces.closed_loop import ClosedLoopWorkload
from traces.errors import TraceFormatError
from traces.generators import lengths_with_arrivals, synthetic_trace
from traces.length_distributions import DISTRIBUTIONS, LengthDistribution, length_distribution, sample_lengths
from traces.readers import LengthsLoadResult, TraceLoadResult, read_lengths, read_trace
from traces.replay import cut, scale_to_qps, time_scale, time_window
from traces.request import Request
from traces.trace_summary import TraceSummary, summarize_lengths, summarize_requests
from traces.workload_profile import WorkloadProfile, builtin_profiles, load_profile
from traces.writers import write_canonical

__all__ = [
    "ARRIVAL_PROCESSES",
    "ClosedLoopWorkload",
    "DISTRIBUTIONS",
    "LengthDistribution",
    "LengthsLoadResult",
    "Request",
    "TraceFormatError",
    "TraceLoadResult",
    "TraceSummary",
    "WorkloadProfile",
    "arrival_times_s",
    "builtin_profiles",
    "cut",
    "length_distribution",
    "lengths_with_arrivals",
    "load_profile",
    "read_lengths",
    "read_trace",
    "sample_lengths",
    "scale_to_qps",
    "summarize_lengths",
    "summarize_requests",
    "synthetic_trace",
    "time_scale",
    "time_window",
    "write_canonical",
]
