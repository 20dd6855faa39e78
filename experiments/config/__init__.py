"""The sweep config (YAML), validated: unknown keys and bad values are errors that name the key.

Schema and defaults follow DESIGN.md ("Files"). A config is one base point plus optional
`variants`: each variant is a dict of dotted keys applied to the base; a list value inside a
variant is crossed, so `{engine.scheduler: sarathi, engine.chunk_size: [256, 512]}` is two points.

Scheduler-specific keys (`SCHEDULER_KEYS`): setting a key the chosen scheduler does not use is an
error, in the layer (base or variant) that set it. A key inherited from the base by a variant
whose scheduler does not use it is dropped for that point, not an error (the base sets
`chunk_size` for sarathi; a `{engine.scheduler: vllm}` variant simply does not have one).
A layer that changes `trace.kind` starts the trace afresh (no trace key is inherited: `qps`
samples a profile but time-scales a file).

Merging: a mapping in a variant or a `--set` value merges key by key into the block it lands on,
exactly as its dotted keys would: `{engine: {chunk_size: 256}}` is `{engine.chunk_size: 256}`
and keeps the base's other engine keys. Values that are one setting, not a block of settings
(`_WHOLE_VALUES`: length specs, `acceptance`, `draft`, a device mapping), replace what was there.

Precedence, lowest first: the file's base, then each variant (expanded into points), then the
`--set` keys, which are the last word and apply to every point. A `--set` that changes a value a
variant set says so in a `ConfigWarning` naming the variants it overrides. A `--set` of a
scheduler-specific key (`engine.chunk_size=300`) applies to the points whose scheduler reads it
and is noted as not applying to the others; it is an error when no point reads it. Points that
come out identical (a `--set engine.scheduler` over variants that differed only in scheduler)
run once, with a warning. Numbers are finite and in range (`_MAX_*` bounds below, each with
its reason); a file trace's path must exist when the config loads, before any point runs.

The package, one file per block, named by the key's first word (where a key is validated):
`trace.py` (trace:), `engine.py` (engine:), `frontend.py` (frontend:), `model_and_device.py` (model:, device:, cost_model:
and how the engine fits them), `cluster.py` (cluster:), `search.py`, `fleet.py`, `slo.py` (slo:
and goodput:), `output.py`, `layouts.py`, `sweep.py` (the whole file, `SweepConfig`, and its
top-level name:); `base.py` (the strict base model, bounds, errors); `merging.py` (variants and
--set merged into a point), `paths.py` (relative paths), `variants.py` (the points a config
expands into), `validate.py` (errors naming file, key and line), `loader.py` (`load_config`),
`labels.py` (`describe_point`, `point_labels`). Everything public is imported here:
`from experiments.config import X` is the way in.
"""
# _Strict: tests walk its models
from experiments.config.base import MAX_KV_BLOCKS, ConfigError, ConfigWarning, _Strict, validation_problems  # noqa: F401
from experiments.config.cluster import (POOLS, ClusterConfig, LinkConfig, PoolConfig, check_cluster, cluster_label,
                                        pool_gpus, pool_point, pool_points)
from experiments.config.engine import (CHUNKING_SCHEDULERS, SCHEDULER_KEYS, AcceptanceFile, DraftModel, EngineConfig,
                                       check_router)
from experiments.config.fleet import FleetConfig
from experiments.config.frontend import FrontendConfig
from experiments.config.labels import describe_point, point_labels
from experiments.config.layouts import LayoutsConfig
from experiments.config.loader import load_config
from experiments.config.model_and_device import engine_gpus
from experiments.config.output import OutputConfig
from experiments.config.paths import _resolve_paths  # noqa: F401 (tests import it)
from experiments.config.search import SearchConfig, repetition_seed_problem
from experiments.config.slo import LATENCY_METRICS, PERCENTILES, slo_summary_key
from experiments.config.sweep import SweepConfig
from experiments.config.trace import (TRACE_KINDS, ClosedLoopTrace, FileTrace, LengthClip, LengthsFileTrace,
                                      LengthSpec, ProfileTrace, SessionsTrace, StagesTrace, SyntheticTrace,
                                      TraceConfig, file_trace_info)
from experiments.config.variants import layouts_of

__all__ = [
    "AcceptanceFile", "CHUNKING_SCHEDULERS", "ClosedLoopTrace", "ClusterConfig", "ConfigError", "ConfigWarning",
    "DraftModel", "EngineConfig", "FileTrace", "FleetConfig", "FrontendConfig", "LATENCY_METRICS", "LayoutsConfig",
    "LengthClip", "LengthSpec", "LengthsFileTrace", "LinkConfig", "MAX_KV_BLOCKS", "OutputConfig", "PERCENTILES", "POOLS",
    "PoolConfig", "ProfileTrace", "SCHEDULER_KEYS", "SearchConfig", "SessionsTrace", "StagesTrace", "SweepConfig",
    "SyntheticTrace",
    "TRACE_KINDS", "TraceConfig", "check_cluster", "check_router", "cluster_label", "describe_point",
    "engine_gpus", "file_trace_info", "layouts_of", "load_config", "point_labels", "pool_gpus", "pool_point",
    "pool_points", "repetition_seed_problem", "slo_summary_key", "validation_problems",
]
