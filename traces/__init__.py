"""What arrives: `Request`, trace-file readers, synthetic generators, built-in workload profiles.

Per-format readers live in `traces.readers`, length samplers in `traces.generators`.
"""
from traces.errors import TraceFormatError
from traces.generators import cut, scale_to_qps, synthetic_trace
from traces.readers import TraceLoadResult, read_trace
from traces.request import Request
from traces.workload_profile import WorkloadProfile, builtin_profiles, load_profile

__all__ = [
    "Request",
    "TraceFormatError",
    "TraceLoadResult",
    "WorkloadProfile",
    "builtin_profiles",
    "cut",
    "load_profile",
    "read_trace",
    "scale_to_qps",
    "synthetic_trace",
]
