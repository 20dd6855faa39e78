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
"""
from __future__ import annotations

import copy
import itertools
import json
import re
import typing
import warnings
from pathlib import Path
from typing import Annotated, Any, Callable, Iterable, Literal, Union

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from profiler import get_device_spec, get_model_spec
from profiler.unknown_key import unknown_key_message
from simulator.metrics import LATENCY_METRICS, PERCENTILES
from simulator.scheduler import SCHEDULERS
from traces import (ClosedLoopWorkload, LengthDistribution, Request, cut, length_distribution, lengths_with_arrivals,
                    read_lengths, read_trace, scale_to_qps, synthetic_trace, time_window)
from traces.arrivals import check_rate
from traces.length_distributions import EmpiricalLength
from traces.readers import FORMATS
from traces.readers.by_format import burstgpt_filter
from traces.sessions import SessionWorkload, read_sessions
from traces.shared_prefix import with_shared_prefixes
from traces.readers.fields import MAX_TOKENS
from traces.time_bounds import MAX_QPS, MAX_SPAN_S, MIN_BURSTINESS, short_number
from traces.workload_profile import check_profile_name


class ConfigError(ValueError):
    """A config problem, already phrased for the user (file, key, what is valid)."""


class ConfigWarning(UserWarning):
    """A config that loads but may not do what its author meant (a --set overriding a variant)."""


# Bounds of counts, each far above any real use and below where the number itself does harm:
# a request count sizes arrays of per-request state up front (10 M requests are GBs and hours of
# simulation), a step's token budget above 2**24 exceeds every built-in model's context (131,072
# at most) over a hundredfold, and seeds are the 32-bit numbers numpy's legacy RandomState takes.
# Request lengths share the trace readers' bound (traces.readers.fields.MAX_TOKENS, 2**31 - 1).
_MAX_REQUESTS = 10_000_000
_MAX_STEP_TOKENS = 2**24
_MAX_SEED = 2**32 - 1
_MAX_REPLICAS = 10_000  # one SimPy process and one KV pool each
# KV blocks one GPU may hold: block ids above 2**31 - 1 do not fit the int32 block table the
# attention kernels read (vllm/v1/worker/block_table.py, `BlockTable.block_table`), and the
# simulator's free list costs ~36 bytes a block (9.2e18 blocks grew to 13 GB before being
# killed). `_check_kv_pool_override` also bounds it by the device's memory.
_MAX_KV_BLOCKS = 2**31 - 1
_MAX_THINK_TIME_S = 1e6  # 11.6 days; float seconds keep sub-microsecond resolution far beyond it
_Seed = Annotated[int, Field(ge=0, le=_MAX_SEED)]
_Requests = Annotated[int, Field(ge=1, le=_MAX_REQUESTS)]
_Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
_StepTokens = Annotated[int, Field(ge=1, le=_MAX_STEP_TOKENS)]


class _Strict(BaseModel):
    # allow_inf_nan=False: NaN and ±inf are refused for every float field (qps: .nan, slo: .inf).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        # YAML `true` would otherwise pass as the integer 1 (chunk_size: true -> chunk 1).
        # Numbers inside a mapping or list (slo: {tbt_p99_s: true}, search.qps: [1, true]) too.
        if isinstance(data, dict):
            for key, value in data.items():
                field = cls.model_fields.get(key)
                if field is None or "bool" in str(field.annotation):
                    continue
                if isinstance(value, bool):
                    raise ValueError(f"{key}: expected a number or name, got {str(value).lower()}")
                if isinstance(value, (dict, list, tuple)) and _NUMBER_TYPES.search(str(field.annotation)):
                    found = _bool_inside(value)
                    if found is not None:
                        raise ValueError(f"{key}: {found[0] or 'an item'}: expected a number, "
                                         f"got {str(found[1]).lower()}")
        return data


_NUMBER_TYPES = re.compile(r"\b(int|float)\b")


def _bool_inside(value: Any, prefix: str = "") -> tuple[str, bool] | None:
    """('tbt_p99_s', True): the path to the first boolean in a nested mapping or list ('[1]' for
    an item) and that boolean; None when it holds none."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        at = f"{prefix}.{key}" if prefix and isinstance(key, str) else str(key) if isinstance(key, str) \
            else f"{prefix}[{key}]"
        if isinstance(item, bool):
            return at, item
        inner = _bool_inside(item, at)
        if inner is not None:
            return inner
    return None


class LengthClip(_Strict):
    """Bounds in tokens applied to lengths drawn from a profile: {min: 1, max: null}."""

    min: _Tokens = 1
    max: _Tokens | None = None

    @model_validator(mode="after")
    def _ordered(self) -> "LengthClip":
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self


# A length: an int (fixed), [low, high] (uniform, inclusive) or {dist: NAME, ...} with min/max
# (traces.length_distributions: fixed, uniform, normal, lognormal, zipf, empirical).
LengthSpec = Union[int, tuple[int, int], dict[str, Any]]


class _OpenLoop(_Strict):
    """Arrival-process keys of the generated kinds: `arrival` at `qps`, gamma's `burstiness`."""

    arrival: Literal["poisson", "gamma", "constant"] = "poisson"
    burstiness: float | None = Field(default=None, ge=MIN_BURSTINESS)  # gamma shape γ (vLLM --burstiness); 1 = Poisson

    @model_validator(mode="after")
    def _burstiness_for_gamma(self) -> "_OpenLoop":
        if self.burstiness is not None and self.arrival != "gamma":
            raise ValueError(f"burstiness applies to arrival: gamma only (arrival is {self.arrival!r})")
        return self

    @model_validator(mode="after")
    def _rate_spans_a_trace(self) -> "_OpenLoop":
        # A kind that knows its count: (num_requests - 1) / qps must stay within traces.time_bounds.
        if getattr(self, "num_requests", None) is not None:
            check_rate(self.qps, self.num_requests)  # ValueError naming qps, the span and the bound
        return self


class _SharedPrefix(_Strict):
    """A shared system prompt of `shared_prefix_tokens`, one of `num_prefixes`, in front of every
    generated prompt (traces.shared_prefix, as vllm bench's prefix_repetition dataset)."""

    shared_prefix_tokens: int = Field(default=0, ge=0)
    num_prefixes: int = Field(default=1, ge=1)

    def with_prefix(self, requests: list[Request]) -> list[Request]:
        return with_shared_prefixes(requests, self.shared_prefix_tokens, self.num_prefixes, self.seed)


class _Lengths(_Strict):
    """`prompt_tokens` and `output_tokens` length specs, checked by traces.length_distribution."""

    prompt_tokens: LengthSpec = 512
    output_tokens: LengthSpec = 128

    @field_validator("prompt_tokens", "output_tokens")
    @classmethod
    def _length_spec(cls, spec: LengthSpec, info) -> LengthSpec:
        # Raises ValueError, naming the problem; the sizes (at most MAX_TOKENS) are checked here,
        # when the config loads, not when a point samples its trace.
        length_distribution(spec, info.field_name.removesuffix("_tokens")).check_sizes()
        return spec

    def distributions(self) -> tuple[LengthDistribution, LengthDistribution]:
        """The prompt and output distributions these specs describe."""
        return length_distribution(self.prompt_tokens, "prompt"), length_distribution(self.output_tokens, "output")


class ProfileTrace(_OpenLoop, _SharedPrefix):
    """Sample a trace from a workload profile (built-in name or .json path): joint lengths, clipped."""

    kind: Literal["profile"]
    name: str
    qps: float = Field(gt=0, le=MAX_QPS)
    num_requests: _Requests = 2048
    seed: _Seed = 0
    prompt_tokens: LengthClip = LengthClip()
    output_tokens: LengthClip = LengthClip()

    @field_validator("name")
    @classmethod
    def _known_profile(cls, name: str) -> str:
        check_profile_name(name)
        return name

    def load(self) -> tuple[list[Request], dict]:
        """Arrivals, then joint lengths through the profile's copula, clipped (traces.synthetic_trace)."""
        prompt, output = (EmpiricalLength(profile=self.name, column=column, min_tokens=clip.min, max_tokens=clip.max)
                          for column, clip in (("prompt", self.prompt_tokens), ("output", self.output_tokens)))
        requests = self.with_prefix(
            synthetic_trace(self.num_requests, self.qps, prompt, output, self.seed, self.arrival, self.burstiness))
        return requests, {"trace_source": f"profile {self.name}", "trace_rows_rejected": 0}


class FileTrace(_Strict):
    """Replay a trace file: filtered, cut to a time window and `max_requests`, time-scaled to `qps`."""

    kind: Literal["file"]
    path: str | None = None  # may be given on the command line: --set trace.path=FILE
    format: str = "auto"
    qps: float | None = Field(default=None, gt=0, le=MAX_QPS)
    max_requests: _Requests | None = None
    window_s: tuple[float, float] | None = None  # [start, end) seconds after the first arrival
    strict: bool = False
    models: list[str] | None = None  # BurstGPT `Model` values to keep
    log_types: list[str] | None = None  # BurstGPT `Log Type` values to keep

    @field_validator("format")
    @classmethod
    def _known_format(cls, name: str) -> str:
        names = [spec.name for spec in FORMATS.values() if spec.has_arrivals]
        if name != "auto" and name not in names:
            raise ValueError(f"unknown trace format {name!r}; valid: auto, {', '.join(names)} "
                             "(lengths-only files: kind lengths_file)")
        return name

    @field_validator("window_s")
    @classmethod
    def _window(cls, window: tuple[float, float] | None) -> tuple[float, float] | None:
        if window is not None and not 0 <= window[0] < window[1]:
            raise ValueError(f"window_s must be [start, end) seconds with 0 <= start < end, got {list(window)}")
        if window is not None and window[0] >= MAX_SPAN_S:  # no trace that loads spans that long
            raise ValueError(f"window_s starts at {window[0]:g} s, after the {short_number(MAX_SPAN_S)} s "
                             "(31.7 years) a trace may span: the window would always be empty")
        return window

    def load(self) -> tuple[list[Request], dict]:
        """Read (lenient unless strict), filter, window, cut to max_requests, then scale to qps."""
        requests, loaded = self.unscaled()
        if self.qps is not None:
            requests = scale_to_qps(requests, self.qps)
        return requests, file_trace_info(self.path, loaded)


    def unscaled(self):
        """(the requests read, filtered, windowed and cut to max_requests, at the file's own times;
        the reader's `LoadedTrace`). Raises as `load`."""
        if self.path is None:
            raise ValueError("trace.path is not set: give it in the config or with --set trace.path=FILE")
        loaded = read_trace(Path(self.path).expanduser(), format=self.format, strict=self.strict,
                            where=burstgpt_filter(self.models, self.log_types))
        requests = loaded.requests
        if self.window_s is not None:
            requests = time_window(requests, *self.window_s)
        if self.max_requests is not None:
            requests = cut(requests, max_requests=self.max_requests)
        return requests, loaded


def file_trace_info(path: str, loaded) -> dict:
    """The info (points.csv columns) of a trace or lengths file read into `loaded` (a reader's
    `RowAccount`): its source, the rows rejected (count, and the reader's account of them), and
    the unknown columns ignored, and the defined ones not used (`trace_unused_columns`: a canonical
    file's request_id), comma-separated ("" when none), which the report and the command line name
    even when no row was rejected."""
    return {"trace_source": str(path), "trace_rows_rejected": loaded.num_rejected,
            "trace_rows_rejected_detail": "; ".join(line.strip() for line in loaded.report_lines()),
            "trace_ignored_columns": ", ".join(loaded.ignored_columns),
            "trace_unused_columns": ", ".join(loaded.unused_columns)}


class SyntheticTrace(_OpenLoop, _Lengths, _SharedPrefix):
    """Generated arrivals (poisson | gamma | constant) and lengths from any distribution.

    `kind: poisson` is this kind with Poisson arrivals (the first name it had).
    """

    kind: Literal["poisson", "synthetic"]
    qps: float = Field(gt=0, le=MAX_QPS)
    num_requests: _Requests = 2048
    seed: _Seed = 0

    @model_validator(mode="after")
    def _poisson_kind(self) -> "SyntheticTrace":
        if self.kind == "poisson" and self.arrival != "poisson":
            raise ValueError(f"kind poisson has Poisson arrivals; for arrival: {self.arrival} use kind: synthetic")
        return self

    def load(self) -> tuple[list[Request], dict]:
        """traces.synthetic_trace: arrivals, then prompt and output lengths."""
        prompt, output = self.distributions()
        requests = self.with_prefix(
            synthetic_trace(self.num_requests, self.qps, prompt, output, self.seed, self.arrival, self.burstiness))
        return requests, {"trace_source": f"{self.kind} {self.arrival}", "trace_rows_rejected": 0}


class LengthsFileTrace(_OpenLoop):
    """A lengths-only file (`*_stats_*.csv`) in file order, arriving by a generated process at `qps`."""

    kind: Literal["lengths_file"]
    path: str | None = None
    qps: float = Field(gt=0, le=MAX_QPS)
    max_requests: _Requests | None = None
    strict: bool = False
    seed: _Seed = 0

    def load(self) -> tuple[list[Request], dict]:
        """Row i (of the valid rows, at most max_requests) is request i (traces.lengths_with_arrivals)."""
        if self.path is None:
            raise ValueError("trace.path is not set: give it in the config or with --set trace.path=FILE")
        loaded = read_lengths(Path(self.path).expanduser(), strict=self.strict)
        rows = slice(None, self.max_requests)
        requests = lengths_with_arrivals(loaded.prompt_tokens[rows], loaded.output_tokens[rows], self.qps,
                                         self.seed, self.arrival, self.burstiness)
        return requests, file_trace_info(self.path, loaded)


class ClosedLoopTrace(_Lengths):
    """`clients` concurrent clients; each sends its next request `think_time_s` after one completes."""

    kind: Literal["closed_loop"]
    clients: _Requests
    think_time_s: float = Field(default=0.0, ge=0, le=_MAX_THINK_TIME_S)
    num_requests: _Requests = 2048
    seed: _Seed = 0

    def workload(self) -> ClosedLoopWorkload:
        """The request source the simulator drives (traces.ClosedLoopWorkload)."""
        prompt, output = self.distributions()
        return ClosedLoopWorkload(self.clients, self.think_time_s, prompt, output, self.num_requests, self.seed)


class SessionsTrace(ClosedLoopTrace):
    """`clients` multi-turn conversations of `turns` turns (traces.sessions): each turn's prompt is
    the whole conversation so far plus `prompt_tokens` new user tokens, the next turn is sent
    `think_time_s` after the answer (`output_tokens`) ends; `shared_prefix_tokens` of one of
    `num_prefixes` system prompts open each conversation. A closed loop: num_requests is
    clients x turns. Or `path:` a CSV of turns (`session_id,turn,user_tokens,output_tokens`,
    traces.sessions.read_sessions), which then gives the conversations and their lengths."""

    kind: Literal["sessions"]
    clients: _Requests | None = None  # conversations (with path: the file's)
    turns: int | None = Field(default=None, ge=1, le=10**6)  # turns per conversation (with path: the file's)
    path: str | None = None  # a CSV of turns: session_id,turn,user_tokens,output_tokens
    shared_prefix_tokens: int = Field(default=0, ge=0)
    num_prefixes: int = Field(default=1, ge=1)
    session_qps: float | None = Field(default=None, gt=0, le=1e6)  # conversations start as a Poisson process at this rate (per s); none: all at 0 s

    @model_validator(mode="before")
    @classmethod
    def _requests_are_turns(cls, data: Any) -> Any:
        if isinstance(data, dict) and "num_requests" not in data:
            clients, turns = data.get("clients"), data.get("turns")
            if all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (clients, turns)):
                data = {**data, "num_requests": clients * turns}
        return data

    @model_validator(mode="after")
    def _turns_make_the_requests(self) -> "SessionsTrace":
        if self.path is not None:
            given = self.model_fields_set & {"clients", "turns", "num_requests", "prompt_tokens", "output_tokens"}
            if given:
                raise ValueError(f"trace.path gives the conversations and their lengths; leave out "
                                 f"{', '.join('trace.' + k for k in sorted(given))}")
            return self
        if self.clients is None or self.turns is None:
            raise ValueError("kind sessions needs trace.clients and trace.turns (or trace.path, a CSV of turns)")
        if self.num_requests != self.clients * self.turns:
            raise ValueError(f"trace.num_requests is clients x turns ({self.clients * self.turns}) for kind "
                             "sessions; leave it out")
        return self

    def workload(self) -> SessionWorkload:
        """The conversations the simulator drives (traces.sessions.SessionWorkload)."""
        if self.path is not None:
            loaded = read_sessions(Path(self.path).expanduser())
            return SessionWorkload.from_turns(loaded.conversations, self.think_time_s, self.shared_prefix_tokens,
                                              self.num_prefixes, self.seed, self.session_qps, loaded.ignored_columns)
        user, output = self.distributions()
        return SessionWorkload(self.clients, self.turns, self.think_time_s, user, output,
                               self.shared_prefix_tokens, self.num_prefixes, self.seed, self.session_qps)


TraceConfig = Annotated[
    Union[ProfileTrace, FileTrace, SyntheticTrace, LengthsFileTrace, ClosedLoopTrace, SessionsTrace],
    Field(discriminator="kind")
]
# Every `kind:` value; validation errors name keys without it (trace.qps, not trace.poisson.qps).
TRACE_KINDS = ("profile", "file", "poisson", "synthetic", "lengths_file", "closed_loop", "sessions")


# Keys that only some schedulers read; every other engine key applies to all of them.
CHUNKING_SCHEDULERS = ("sarathi", "vllm_v1", "simple_chunking", "fastgen")
SCHEDULER_KEYS: dict[str, set[str]] = {
    **{name: {"chunk_size"} for name in CHUNKING_SCHEDULERS},
    **{name: {"max_num_batched_tokens"} for name in ("vllm", "orca", "faster_transformer")},
}
SCHEDULER_KEYS["vllm_v1"] = {"chunk_size", "long_prefill_token_threshold", "enable_prefix_caching"}
_SCHEDULER_SPECIFIC = set().union(*SCHEDULER_KEYS.values())


class DraftModel(_Strict):
    """Split-N with a draft model: the named (smaller) model's steps are priced by the cost model."""

    model: str


class AcceptanceFile(_Strict):
    """Measured (proposed, accepted) pairs per verify step: a CSV with those two columns."""

    file: str


class EngineConfig(_Strict):
    """Serving-engine settings of one point (DESIGN.md's `engine:` block)."""

    scheduler: str = "sarathi"
    chunk_size: _StepTokens = 512
    max_num_batched_tokens: _StepTokens | None = None
    long_prefill_token_threshold: _StepTokens | None = None
    max_num_seqs: _StepTokens = 128
    max_model_len: int | None = Field(default=None, ge=2, le=_MAX_STEP_TOKENS)
    block_size: int = Field(default=16, ge=1, le=256)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    num_gpu_blocks: int | None = Field(default=None, ge=1, le=_MAX_KV_BLOCKS)  # and what the device holds
    dtype: Literal["bf16", "fp8"] = "bf16"
    kv_cache_dtype: Literal["bf16", "fp8"] = "bf16"
    tensor_parallel_size: int = Field(default=1, ge=1)
    pipeline_parallel_size: int = Field(default=1, ge=1)
    replicas: int = Field(default=1, ge=1, le=_MAX_REPLICAS)
    router: Literal["round_robin", "least_outstanding", "random", "prefix_aware", "session_affinity"] = "round_robin"
    router_overlap_weight: float = Field(default=1.0, ge=0, le=1e6)  # read by router prefix_aware only: weight of uncached prompt blocks against active blocks (simulator/router.py; Dynamo's --kv-overlap-score-weight)
    # vLLM's --data-parallel-size and --enable-expert-parallel (simulator/data_parallel.py,
    # profiler/moe_cost.py); expert_routing_skew: power-law exponent of expert popularity (0: uniform);
    # num_gpus: optional check that replicas × data_parallel_size × tensor_parallel_size × pipeline_parallel_size match it
    # (with cluster:, every pool's replicas × data_parallel_size × tensor_parallel_size × pipeline_parallel_size together).
    data_parallel_size: int = Field(default=1, ge=1, le=1024)
    enable_expert_parallel: bool = False
    expert_routing_skew: float = Field(default=0.0, ge=0, le=4)
    num_gpus: int | None = Field(default=None, ge=1)
    preemption: Literal["recompute", "swap"] = "recompute"
    policy: Literal["fcfs", "priority"] = "fcfs"
    split_n: int = Field(default=0, ge=0, le=64)
    acceptance: Annotated[float, Field(ge=0, le=1)] | list[Annotated[float, Field(ge=0, le=1)]] | AcceptanceFile = 0.7
    draft: Literal["ngram"] | DraftModel = "ngram"
    seed: _Seed = 0
    on_too_long: Literal["reject", "truncate"] = "reject"  # prompt + output > max_model_len
    enable_prefix_caching: bool = True  # vllm_v1 only, on as in vLLM V1 (simulator/scheduler/prefix_cache.py)

    @field_validator("acceptance", mode="before")
    @classmethod
    def _acceptance_shape(cls, value: Any) -> Any:
        # Checked here so the error names what is valid instead of pydantic's union branches.
        valid = "a probability α in [0, 1], a list [α_1, ..., α_N] of them, or {file: CSV with proposed,accepted}"
        if isinstance(value, dict):
            return value
        values = value if isinstance(value, list) else [value]
        if not values or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1
                             for v in values):
            raise ValueError(f"acceptance must be {valid}")  # _validate adds what it got
        return value

    @field_validator("scheduler")
    @classmethod
    def _known_scheduler(cls, value: str) -> str:
        if value not in SCHEDULERS:
            raise ValueError(f"unknown scheduler {value!r}; valid: {', '.join(sorted(SCHEDULERS))}")
        return value

    @model_validator(mode="after")
    def _supported(self) -> "EngineConfig":
        for key in self.model_fields_set & _SCHEDULER_SPECIFIC:
            if key not in SCHEDULER_KEYS[self.scheduler]:
                users = [s for s, keys in SCHEDULER_KEYS.items() if key in keys]
                raise ValueError(
                    f"engine.{key} is not used by scheduler {self.scheduler!r} (only by {', '.join(users)})"
                )
        check_router(self.router, "engine.router", self, "engine")
        if self.split_n and isinstance(self.acceptance, list) and len(self.acceptance) != self.split_n:
            raise ValueError(f"engine.acceptance lists {len(self.acceptance)} per-position probabilities but "
                             f"split_n is {self.split_n}: give exactly one per draft position")
        if self.scheduler in CHUNKING_SCHEDULERS and self.max_num_seqs > self.chunk_size:
            raise ValueError(
                f"max_num_seqs ({self.max_num_seqs}) must be <= chunk_size ({self.chunk_size}): "
                "each decode takes one token of the budget"
            )
        return self

    @property
    def token_budget(self) -> int | None:
        """Per-step token budget: chunk_size (chunking) or max_num_batched_tokens (None = max_model_len)."""
        return self.chunk_size if self.scheduler in CHUNKING_SCHEDULERS else self.max_num_batched_tokens

    def used_settings(self) -> dict[str, Any]:
        """The settings this point's scheduler and router actually read, as table cells (for
        CSV/Parquet columns: lists and mappings such as `acceptance` or `draft` become JSON text;
        `router_overlap_weight` only beside router prefix_aware, the one that reads it)."""
        return {k: json.dumps(v) if isinstance(v, (dict, list)) else v
                for k, v in self.model_dump(mode="json").items()
                if (k not in _SCHEDULER_SPECIFIC or k in SCHEDULER_KEYS[self.scheduler])
                and (k != "router_overlap_weight" or self.router == "prefix_aware")}


def check_router(router: str, router_key: str, e: EngineConfig, engine_key: str) -> None:
    """The router checks of a colocated engine (`engine.router` over `engine:`) and of a cluster
    pool (`cluster.<pool>.router` over the pool's merged engine, `check_cluster`): one rule for
    both. `router_key` / `engine_key` name where the user sets them.

    Raises:
        ValueError: router prefix_aware without scheduler vllm_v1 and enable_prefix_caching true
            (it routes by each replica's prefix cache, simulator/router.py); router_overlap_weight
            set explicitly beside another router (only prefix_aware reads it: the default, 1,
            is no setting and passes).
    """
    if router == "prefix_aware" and not (e.scheduler == "vllm_v1" and e.enable_prefix_caching):
        raise ValueError(f"{router_key} prefix_aware routes by each replica's prefix cache: it needs "
                         f"{engine_key}.scheduler vllm_v1 with {engine_key}.enable_prefix_caching true (got scheduler "
                         f"{e.scheduler!r}, enable_prefix_caching {e.enable_prefix_caching})")
    if "router_overlap_weight" in e.model_fields_set and router != "prefix_aware":
        raise ValueError(f"{engine_key}.router_overlap_weight applies only to router: prefix_aware (its weight of "
                         f"uncached prompt blocks against load); {router_key} {router} does not read it: remove it "
                         f"or set {router_key}: prefix_aware")


class SearchConfig(_Strict):
    """Capacity search per point (experiments/planning/capacity.py): bisection on QPS within `qps`.

    Each trial simulates `num_requests` at one QPS; warm-up and drain (`trim_fraction` of the
    arrival span at each end) are left out of the latency statistics; the search repeats for
    `seeds` seeds for a confidence interval: repetition k runs the trace's `seed` + k (its
    sampling) and the engine's `seed` + k (speculative acceptance, random routers), as the xPyD
    search (experiments/planning/repetitions.py). A file trace is replayed the same every seed,
    so only the engine's draws vary: the report warns of it.
    """

    qps: tuple[float, float] = (0.5, 64.0)
    precision: float = Field(default=0.025, gt=0, lt=1)
    num_requests: int = Field(default=2048, ge=10, le=_MAX_REQUESTS)
    seeds: int = Field(default=3, ge=1, le=20)
    trim_fraction: float = Field(default=0.1, ge=0, lt=0.5)
    max_trials: int = Field(default=20, ge=2, le=60)
    loads: list[Annotated[float, Field(gt=0, le=MAX_QPS)]] = []  # QPS grid for the load-dependent policy table

    @field_validator("qps")
    @classmethod
    def _bracket(cls, qps: tuple[float, float]) -> tuple[float, float]:
        if not 0 < qps[0] < qps[1] < float("inf"):
            raise ValueError(f"search.qps must be [low, high] with 0 < low < high, got {list(qps)}")
        if qps[1] > MAX_QPS:
            raise ValueError(f"search.qps high ({qps[1]:g}) exceeds {short_number(MAX_QPS)} requests/s, "
                             "the highest rate a trace may be drawn at (traces.time_bounds.MAX_QPS)")
        return qps

    @model_validator(mode="after")
    def _low_rate_spans_a_trace(self) -> "SearchConfig":
        # The lowest trial draws num_requests at qps[0]; traces.check_rate bounds its span.
        try:
            check_rate(self.qps[0], self.num_requests)
        except ValueError as exc:
            raise ValueError(f"search.qps low: {exc}") from None
        return self


class LayoutsConfig(_Strict):
    """`layouts: {gpus: N}`: a sweep axis that crosses every point with every parallel layout of
    exactly N GPUs the model can take (`experiments.planning.layouts`), in vLLM's flag names: for
    a mixture of experts one data-parallel group, `tensor_parallel_size` × `data_parallel_size` = N,
    with `enable_expert_parallel` off and on (EP = N); for a dense model `tensor_parallel_size` ×
    `pipeline_parallel_size` × `data_parallel_size` = N (DP only without PP; vLLM runs a dense
    model's DP ranks as independent engines); and, with `replicas: true`, `replicas` behind the
    point's router where DP cannot say it: of a DP-1 MoE engine, of a pipelined dense engine. A
    layout the model cannot take (TP not dividing its heads, EP not dividing its experts, ...) is
    skipped with the reason in the warnings and the report. `layouts:` sets those engine keys
    itself, so they (and `num_gpus`) may not be set beside it."""

    gpus: int = Field(ge=1, le=1024)  # GPUs of every layout (experiments.planning.layouts.MAX_LAYOUT_GPUS)
    replicas: bool = True  # also replicas of a smaller engine; false: one engine on all the GPUs

    @field_validator("gpus", mode="before")
    @classmethod
    def _whole_gpus(cls, value: Any) -> Any:
        # One message naming what is valid instead of pydantic's per-type ones ("4.0", "4" and 0 alike).
        if not isinstance(value, int) or not 1 <= value <= 1024:
            raise ValueError("must be a whole number of GPUs from 1 to 1024, e.g. layouts: {gpus: 8}")
        return value


class FleetConfig(_Strict):
    """Fleet sizing from a capacity search: replicas of each point needed for `target_qps`, and
    the cost per million output tokens at `gpu_hour_usd` per GPU-hour."""

    target_qps: float = Field(gt=0)
    gpu_hour_usd: float | None = Field(default=None, gt=0)


_SLO_KEY = re.compile(r"^(?P<metric>[a-z_]+?)_p(?P<pct>\d+(?:\.\d+)?)_s$")


class OutputConfig(_Strict):
    """What each point keeps of its records, for huge runs (simulator/records.py).

    `token_times: false` drops the per-token `token_times_s` column of requests.parquet (memory
    then no longer grows with output length; TBT/ITL percentiles come from a log-binned sketch
    within 0.1 %, simulator/records_sketch.py; the report has no TBT CDF). `steps: false` keeps no
    step rows, so no steps.parquet (the summary's step count and KV usage are still computed)."""

    token_times: bool = True
    steps: bool = True


class PoolConfig(_Strict):
    """One pool of a disaggregated cluster (`cluster.prefill` or `cluster.decode`): its replicas,
    device and router, and the `engine:` keys that differ for it (merged over the point's
    `engine:`, then checked as `engine:` is; errors name `cluster.<pool>.engine`). A pool's
    router is checked as a colocated one over the pool's engine (prefix_aware needs vllm_v1 with
    prefix caching); `engine.num_gpus` counts every pool's GPUs (replicas × DP × TP × PP). With
    `engine.data_parallel_size` D > 1 each instance is one vLLM engine of D DP ranks (with
    `enable_expert_parallel`, a wide-EP mixture of experts), requests spread over its ranks by
    vLLM's DP balancer as a colocated DP engine's are (simulator/disaggregated.py); DP with PP, and
    a mixture of experts' DP with swap or a draft model, are refused as colocated; router
    prefix_aware over DP instances is refused (the balancer reads no prefix cache). A pool's DP is
    its own key only: the point's `engine.data_parallel_size` > 1 beside `cluster:` is refused."""

    replicas: int = Field(default=1, ge=1, le=_MAX_REPLICAS)  # instances in the pool
    device: str | dict[str, Any] | None = None  # default: the point's device
    router: Literal["round_robin", "least_outstanding", "random", "prefix_aware",  # prefix_aware: cache hit first; session_affinity: a conversation's turns to one instance
                    "session_affinity"] = "least_outstanding"
    engine: dict[str, Any] = {}  # e.g. {tensor_parallel_size: 2, chunk_size: 2048} or {data_parallel_size: 4, enable_expert_parallel: true}; not replicas, router, router_overlap_weight, num_gpus


class LinkConfig(_Strict):
    """The KV link from a prefill instance into a decode instance (simulator/disaggregated.py:
    latency + bytes / bandwidth per transfer, one at a time into each decode instance)."""

    bandwidth_gb_s: float | Literal["device"] = (  # GB/s per TP rank (1e9 B/s), > 0; device: its GPU-to-GPU link
        "device")
    latency_s: float = Field(default=0.0, ge=0, le=60)  # per transfer
    layer_pipelined: bool = False  # stream each layer's KV as the last prefill step computes it

    @field_validator("bandwidth_gb_s", mode="before")
    @classmethod
    def _bandwidth(cls, value: Any) -> Any:
        # One message instead of pydantic's two union branches.
        if value == "device":
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise ValueError("must be a bandwidth > 0 in GB/s (a link of zero bandwidth moves no KV) or 'device'")
        return value


class ClusterConfig(_Strict):
    """Prefill/decode disaggregation (simulator/disaggregated.py): a request is prefilled in the
    prefill pool (TTFT ends there), its prompt's KV crosses the link, and it decodes in the decode
    pool. Without `cluster:` the point's replicas are colocated (`engine.replicas`)."""

    prefill: PoolConfig = PoolConfig()
    decode: PoolConfig = PoolConfig()
    link: LinkConfig = LinkConfig()


class SweepConfig(_Strict):
    """A whole config file: one base point, its variants, SLOs and goodput thresholds."""

    name: str = "sweep"
    model: str = "llama-3-8b"
    device: str | dict[str, Any] = "h100-sxm"  # built-in name, device YAML file or inline mapping
    cost_model: str = "auto"
    trace: TraceConfig
    engine: EngineConfig = EngineConfig()
    variants: list[dict[str, Any]] = []
    slo: dict[str, float] = {}
    goodput: dict[str, float] = {}
    search: SearchConfig | None = None
    fleet: FleetConfig | None = None
    output: OutputConfig = OutputConfig()
    cluster: ClusterConfig | None = None  # prefill/decode disaggregation; none: colocated replicas
    layouts: LayoutsConfig | None = None  # cross every point with every TP × DP × EP (or TP × PP) layout of N GPUs

    @model_validator(mode="after")
    def _layouts_exist(self) -> "SweepConfig":
        if self.layouts is not None:
            if self.cluster is not None:
                raise ValueError("layouts: enumerates colocated layouts; a cluster: point sets its pools itself "
                                 "(compare xPyD splits with sarathi-sim search-xpyd)")
            from experiments.planning.layouts import enumerate_layouts

            try:
                enumerate_layouts(get_model_spec(self.model), self.layouts.gpus, self.layouts.replicas)
            except (ValueError, OSError) as exc:  # a bad model is reported by _deployment_fits
                if isinstance(exc, ValueError) and str(exc).startswith("layouts."):
                    raise
        return self

    @model_validator(mode="before")
    @classmethod
    def _no_weight_beside_cluster(cls, data: Any) -> Any:
        # Before `engine:` is validated: its own check would ask for engine.router: prefix_aware,
        # which a cluster does not read either (a hint that led to a second error).
        if isinstance(data, dict) and data.get("cluster") is not None and isinstance(data.get("engine"), dict) \
                and "router_overlap_weight" in data["engine"]:
            raise ValueError(f"engine.router_overlap_weight is not read with cluster: {_NO_POOL_WEIGHT}")
        return data

    @model_validator(mode="after")
    def _cluster_pools(self) -> "SweepConfig":
        if self.cluster is not None:
            check_cluster(self)
        return self

    @model_validator(mode="after")
    def _sessions_for_affinity(self) -> "SweepConfig":
        if self.engine.router == "session_affinity" and not isinstance(self.trace, SessionsTrace):
            raise ValueError(f"engine.router session_affinity sends a conversation's turns to one replica: it "
                             f"needs trace kind sessions (got kind {self.trace.kind!r}, whose requests belong "
                             "to no conversation)")
        return self

    @model_validator(mode="after")
    def _fleet_needs_search(self) -> "SweepConfig":
        if self.fleet is not None and self.search is None:
            raise ValueError("fleet: sizing needs a capacity search; add search: {...}")
        return self

    @model_validator(mode="after")
    def _repetition_seeds_valid(self) -> "SweepConfig":
        # The search's repetition k runs the trace's and engine's seeds + k (planning/repetitions.py):
        # each must stay a seed, checked here rather than when repetition k starts (`repetition_seed_problem`).
        if self.search is not None:
            problem = repetition_seed_problem(self, self.search.seeds)
            if problem is not None:
                raise ValueError(f"search.seeds: {problem}")
        return self

    @field_validator("name")
    @classmethod
    def _folder_name(cls, name: str) -> str:  # the default --out is runs/<name>: it stays inside runs/
        if not name.strip() or name.strip(".") == "" or any(c in name for c in "/\\\0"):
            raise ValueError(f"{name!r} is not a folder name: runs/<name> is the default --out, so use one "
                             "non-empty name without / or \\ (e.g. my-sweep)")
        return name

    @field_validator("cost_model")
    @classmethod
    def _cost_model(cls, value: str) -> str:
        from profiler.shipped import parse_cost_model  # auto | roofline | profile:DIR

        return parse_cost_model(value)

    @model_validator(mode="after")
    def _deployment_fits(self) -> "SweepConfig":
        """Names and shapes checked before any point runs: model, device, TP split, context."""
        try:
            model = get_model_spec(self.model)
        except (ValueError, OSError) as exc:
            raise ValueError(f"model: {exc}") from None
        try:
            device = get_device_spec(self.device)
        except ValueError as exc:
            raise ValueError(f"device: {exc}") from None
        e = self.engine
        try:
            model.kv_heads_per_rank(e.tensor_parallel_size)
        except ValueError as exc:
            raise ValueError(f"engine.tensor_parallel_size: {exc}") from None
        if e.pipeline_parallel_size > model.num_layers:
            raise ValueError(f"engine.pipeline_parallel_size ({e.pipeline_parallel_size}) exceeds "
                             f"{model.name}'s {model.num_layers} layers")
        _check_parallel_layout(e, model, check_num_gpus=self.cluster is None)  # a cluster's: check_cluster
        if e.num_gpu_blocks is not None:
            _check_kv_pool_override(e, model, device)
        if self.cost_model.startswith("profile:") and model.moe is None and self.cluster is None:
            _check_profile(self.cost_model, model, e.tensor_parallel_size, device.name)
        if e.split_n and isinstance(e.acceptance, AcceptanceFile):
            from simulator.acceptance import EmpiricalAcceptance
            try:
                EmpiricalAcceptance.from_file(e.acceptance.file)
            except ValueError as exc:
                raise ValueError(f"engine.acceptance.file: {exc}") from None
        if e.split_n and isinstance(e.draft, DraftModel):
            try:
                get_model_spec(e.draft.model)
            except (ValueError, OSError) as exc:
                raise ValueError(f"engine.draft.model: {exc}") from None
        if self.search is not None and isinstance(self.trace, ClosedLoopTrace):
            raise ValueError("search: a closed-loop trace sets a number of clients, not a QPS; "
                             "search capacity with an open-loop trace (profile, synthetic, file)")
        if e.max_model_len is not None and e.max_model_len > model.max_model_len:
            raise ValueError(f"engine.max_model_len ({e.max_model_len}) exceeds {model.name}'s context of "
                             f"{model.max_model_len} tokens (vLLM refuses this too)")
        return self

    @field_validator("slo")
    @classmethod
    def _slo_keys(cls, slo: dict[str, float]) -> dict[str, float]:
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
        return slo

    @field_validator("goodput")
    @classmethod
    def _goodput_keys(cls, goodput: dict[str, float]) -> dict[str, float]:
        valid = {"ttft_s", "tpot_s", "e2e_s"}
        for key, value in goodput.items():
            if key not in valid:
                raise ValueError(f"bad goodput key {key!r}; valid: {', '.join(sorted(valid))}")
            if value <= 0:  # NaN and inf are refused before this (allow_inf_nan=False)
                raise ValueError(f"goodput {key} must be a finite number > 0 seconds, got {value}")
        return goodput


def _check_profile(cost_model: str, model, tensor_parallel_size: int, device_name: str) -> None:
    """ValueError (naming `cost_model`) unless the `profile:DIR` profile was measured for this
    model, tp and device and can be fitted (`profiler.shipped.checked_profile`): when the config
    loads, not as a failure of each point at run time. A cluster's pools and a mixture of experts
    price their own way (`experiments.point.build_cost_model`) and are checked when they run."""
    from profiler.shipped import checked_profile  # the fit-coverage check imports scikit-learn

    try:
        checked_profile(cost_model.removeprefix("profile:"), model, tensor_parallel_size, device_name)
    except ValueError as exc:
        raise ValueError(f"cost_model: {exc}") from None


def _check_kv_pool_override(e: EngineConfig, model, device) -> None:
    """ValueError unless `engine.num_gpu_blocks` could be held by one GPU of `device`.

    The bound is the device's whole memory (`memory_gib`, not × gpu_memory_utilization) as KV of
    one pipeline stage's layers at the smallest KV dtype (fp8, 1 byte a value), with no weights:
    a generous ceiling, so an override may still model a pool larger than vLLM would size, but
    not one no GPU of this kind could allocate (vLLM's --num-gpu-blocks-override would fail).
    """
    stage_layers = -(-model.num_layers // e.pipeline_parallel_size)
    block_bytes = e.block_size * model.kv_bytes_per_token(1, e.tensor_parallel_size) // model.num_layers * stage_layers
    most_blocks = int(device.memory_gib * 2**30 // block_bytes)
    if e.num_gpu_blocks > most_blocks:
        raise ValueError(
            f"engine.num_gpu_blocks: {e.num_gpu_blocks} blocks are more KV than one {device.name} holds: blocks of "
            f"{e.block_size} tokens of {model.name} take {block_bytes:,} bytes each even at 1 byte a value, so its "
            f"{device.memory_gib:g} GiB hold at most {most_blocks:,} (with no weights)")


def slo_summary_key(slo_key: str) -> str:
    """'tbt_p99_s' -> the summary column 'tbt_s_p99'."""
    m = _SLO_KEY.match(slo_key)
    return f"{m['metric']}_s_p{float(m['pct']):g}"


# ----- loading -------------------------------------------------------------------------------

def load_config(path: str | Path, overrides: list[str] = (),
                on_warning: Callable[[str], None] | None = None) -> tuple[SweepConfig, list[dict[str, Any]]]:
    """Read, override and validate a config file; expand its variants.

    Precedence (the module docstring): the file's base, then each variant, then the `--set`
    keys, applied to every point after its variant. Mappings merge as their dotted keys would.

    Args:
        path: the YAML file.
        overrides: "dotted.key=value" strings (value parsed as YAML).
        on_warning: called with the text of each warning (a --set changing what a variant set, a
            --set some points' scheduler does not read, points that came out identical);
            default `warnings.warn(text, ConfigWarning)`.

    Returns:
        (base config with the --set keys, list of point dicts ready for
        `SweepConfig.model_validate`, one per distinct point, in variant order). With --set keys
        the base's `variants` are the points as run (`_variants_as_run`), so the base dumped and
        loaded again with no --set gives the same points.

    Raises:
        ConfigError: with the file, the key (and its line where known) and what is valid; also a
            --set no point reads, and a file trace whose path is unset or does not exist.
    """
    path = Path(path)
    said: list[str] = []
    raw, root_node = _read_yaml(path)
    folder = path.resolve().parent
    _resolve_paths(raw, folder)
    set_keys = _parse_overrides(overrides)
    _resolve_paths(set_keys, Path.cwd())
    if "variants" in set_keys:  # --set 'variants=[...]' replaces the list the points come from
        raw["variants"] = set_keys.pop("variants")
    base_tree = copy.deepcopy(raw)
    _apply_overrides(base_tree, {}, set_keys)
    _check_layout_keys(base_tree, raw, set_keys, path, root_node)
    base = _validate(base_tree, path, root_node, where="", set_keys=set_keys)
    layouts = _layouts_of(base, path, said.append)
    points = _expand(raw, set_keys, path, root_node, said.append, layouts)
    if set_keys and (raw.get("variants") or base.layouts is not None):  # the base records its points as run
        # (config.yaml loads again: `experiments.planning.sweep.config_as_run` drops the layouts they hold)
        base = base.model_copy(update={"variants": _variants_as_run(base_tree, [tree for tree, _, _ in points])})
    in_file = isinstance(raw.get("trace"), dict) and "path" in raw["trace"] and "trace.path" not in set_keys
    qps_in_file = isinstance(raw.get("trace"), dict) and "qps" in raw["trace"] and "trace.qps" not in set_keys
    _check_trace_files(points, base, path, _line_of(root_node, ["trace", "path"]) if in_file else None,
                       _line_of(root_node, ["trace", "qps"]) if qps_in_file else None, "trace.qps" in set_keys)
    for text in said:  # only for a config that loads
        if on_warning is None:
            warnings.warn(text, ConfigWarning, stacklevel=2)  # at the caller's line
        else:
            on_warning(text)
    return base, [tree for tree, _, _ in points]


def _read_yaml(path: Path):
    """(the file's mapping, its YAML node tree for line numbers); ConfigError if unreadable."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text (UTF-8) YAML file") from None
    try:
        raw = yaml.safe_load(text) or {}
        root_node = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    except (ValueError, RecursionError) as exc:  # a 4,300-digit integer; nesting deeper than the stack
        raise ConfigError(f"{path}: cannot read the YAML: {_parse_problem(exc)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys (name, model, trace, engine, ...)")
    return raw, root_node


def _parse_problem(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc).split(";")[0]  # Python's int-digits message, without its sys.set_int_max_str_digits hint


def _parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """--set strings as flat dotted keys (a mapping value becomes its dotted keys; later wins)."""
    set_keys: dict[str, Any] = {}
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected dotted.key=value, e.g. --set trace.path=conv.csv")
        if any(not part.strip() for part in key.split(".")):  # engine..chunk_size, .qps, trace.
            raise ConfigError(f"--set {item!r}: the key {key!r} is malformed (an empty part between dots); "
                              "write dotted keys such as engine.chunk_size=256")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError(f"--set {item!r}: the value is not valid YAML ({problem}); "
                              "quote text, write lists as [1, 2] and mappings as {k: v}") from None
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"--set {item!r}: cannot read the value: {_parse_problem(exc)}") from None
        set_keys.update(_flatten({key: value}))
    return set_keys


# Mapping values that are one setting, not a block of settings: a variant or --set replaces them
# whole (a length spec switching `dist: zipf` to `dist: normal` must not keep `theta`).
_WHOLE_VALUES = ("device", "trace.prompt_tokens", "trace.output_tokens", "engine.acceptance", "engine.draft")


def _flatten(layer: dict, prefix: str = "") -> dict[str, Any]:
    """A variant or --set layer as dotted keys: {engine: {chunk_size: 256}} -> {engine.chunk_size: 256},
    so nested and dotted forms merge identically. `_WHOLE_VALUES` stay whole; an empty mapping
    (nothing to merge) adds no key."""
    flat: dict[str, Any] = {}
    for key, value in layer.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and dotted not in _WHOLE_VALUES:
            flat.update(_flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def _check_layout_keys(base_tree: dict, raw: dict, set_keys: dict[str, Any], path: Path, root_node) -> None:
    """Before the base is validated (whose own checks of these keys, engine.num_gpus against
    DP × TP × PP, would not say that layouts: sets them).

    Raises:
        ConfigError: beside `layouts:`, an engine key a layout sets (`LAYOUT_KEYS`) also set by
            the base, a variant or a --set, naming where.
    """
    layouts = base_tree.get("layouts")
    if not isinstance(layouts, dict):
        return  # none, or not a mapping (said by _validate)
    from experiments.planning.layouts import LAYOUT_KEYS

    gpus = layouts.get("gpus")
    gpus = f" ({gpus} GPUs)" if isinstance(gpus, int) and not isinstance(gpus, bool) else ""
    owned = {f"engine.{key}" for key in LAYOUT_KEYS}
    engine = raw.get("engine") if isinstance(raw.get("engine"), dict) else {}
    clashes = [(f"engine.{k}", _line_of(root_node, ["engine", k])) for k in engine if f"engine.{k}" in owned]
    for index, variant in enumerate(raw.get("variants") or []):
        if isinstance(variant, dict):
            clashes += [(f"variants[{index}] {k}", _variant_line(root_node, index))
                        for k in _flatten(variant) if k in owned]
    clashes += [(f"--set {k}", None) for k in set_keys if k in owned]
    if clashes:
        key, line = clashes[0]
        raise ConfigError(f"{path}: {key}{f' (line {line})' if line else ''}: layouts: sets "
                          f"{', '.join(sorted(owned))} of every point{gpus}; drop it here, "
                          "or drop layouts: and list the layouts as variants")


def _layouts_of(base: SweepConfig, path: Path, warn: Callable[[str], None]) -> list:
    """The layouts `layouts:` crosses every point with (`experiments.planning.layouts`), as
    dotted engine keys; [{}] without it (the points as the variants give them). Warns naming
    each layout skipped and why (the reports list them too: `planning.report.layout_lines`).
    The engine keys a layout sets were checked unset (`_check_layout_keys`).
    """
    if base.layouts is None:
        return [{}]
    try:
        valid, skipped = layouts_of(base)
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if skipped:
        warn(f"layouts: {len(skipped)} of the {len(valid) + len(skipped)} layouts of {base.layouts.gpus} GPUs are "
             f"skipped: " + "; ".join(f"{layout.text()} ({why})" for layout, why in skipped))
    return [layout.engine_keys() for layout in valid]


def layouts_of(base: SweepConfig) -> tuple[list, list[tuple[Any, str]]]:
    """(the layouts `base.layouts` runs, the skipped ones with why): those of
    `experiments.planning.layouts.enumerate_layouts` that the model can take, less those the base's
    other settings rule out (a DP group with `preemption: swap` or a draft model is not modelled),
    each with the check's message.

    Raises:
        ValueError: `base.layouts` unset, or no layout left (naming `layouts.gpus` and why each went).
    """
    from experiments.planning.layouts import enumerate_layouts

    valid, skipped = enumerate_layouts(get_model_spec(base.model), base.layouts.gpus, base.layouts.replicas)
    tree = base.model_dump(exclude_unset=True)
    tree.pop("variants", None)
    tree.pop("layouts", None)
    kept = []
    for layout in valid:
        point = copy.deepcopy(tree)
        point["engine"] = {**point.get("engine", {}),
                           **{key.removeprefix("engine."): value for key, value in layout.engine_keys().items()}}
        try:
            SweepConfig.model_validate(point)
        except ValidationError as exc:
            skipped.append((layout, validation_problems(exc, keyed=False)))
        else:
            kept.append(layout)
    if not kept:
        raise ValueError(f"layouts.gpus: none of the {len(skipped)} layouts of {base.layouts.gpus} GPUs can run this "
                         "point: " + "; ".join(f"{layout.text()}: {why}" for layout, why in skipped))
    return kept, skipped


def _expand(raw: dict, set_keys: dict[str, Any], path: Path, root_node,
            warn: Callable[[str], None], layouts: list[dict[str, Any]] = ({},)) -> list[tuple[dict, SweepConfig, str]]:
    """The points (tree, validated config, which variant): each variant's combinations on the base,
    each crossed with the `layouts` (engine keys, `_layouts_of`), then the --set keys. Warns about
    variants a --set overrode, points a --set does not apply to, and identical points (kept once);
    ConfigError for a --set that applies to no point."""
    variants = raw.get("variants") or [{}]
    overridden: dict[str, dict[str, list]] = {}  # set key -> {"variants[i] (key)": [values]}
    not_applied: dict[str, list[str]] = {key: [] for key in set_keys}
    points: list[tuple[dict, SweepConfig, str]] = []
    same: dict[str, list[str]] = {}  # a point's settings -> the labels of the points that have them
    for index, variant in enumerate(variants):
        if not isinstance(variant, dict):
            raise ConfigError(f"{path}: variants[{index}] must be a mapping of dotted keys, got {variant!r}")
        layer = _flatten(variant)
        empty = [k for k, v in layer.items() if v == []]
        if empty:
            raise ConfigError(f"{path}: variants[{index}] {empty[0]}: an empty list gives no points; "
                              "list at least one value")
        line = _variant_line(root_node, index)
        for combo, layout in itertools.product(_cross(layer), layouts):
            where = f"variants[{index}] {_shown(combo)}" if raw.get("variants") else "the base"
            if layout:
                where += f" layout {_shown(layout)}"
            tree = _apply_variant(raw, {**combo, **layout}, f"{path}: variants[{index}]")
            changed, skipped = _apply_overrides(tree, combo, set_keys)
            tree.pop("layouts", None)  # expanded: each point is one layout
            _resolve_paths(tree, path.resolve().parent)
            config = _validate(tree, path, root_node, where=f"{where}: " if raw.get("variants") or layout else "",
                               line=line, set_keys=set_keys, line_keys=list(combo))
            label = f"{where} ({describe_point(config)})"
            for set_key, variant_key in changed:
                values = overridden.setdefault(set_key, {}).setdefault(f"variants[{index}] ({variant_key}", [])
                if combo[variant_key] not in values:
                    values.append(combo[variant_key])
            for set_key in skipped:
                not_applied[set_key].append(label)
            labels = same.setdefault(_settings_of(config), [])
            labels.append(where)
            if len(labels) == 1:
                points.append((tree, config, where))
    _warn_overridden(overridden, set_keys, warn)
    _warn_not_applied(not_applied, set_keys, sum(len(labels) for labels in same.values()), warn)
    for _, config, where in points:
        labels = same[_settings_of(config)]
        if len(labels) > 1:
            warn(f"{len(labels)} points are the same{' once the --set keys are applied' if set_keys else ''} "
                 f"({describe_point(config)}): {', '.join(labels)}; it runs once, as {where}")
    return points


def _variants_as_run(base_tree: dict, point_trees: list[dict]) -> list[dict[str, Any]]:
    """Variants that give `point_trees` again from `base_tree` with no --set: each point's dotted
    keys whose value differs from the base's (every trace key where the trace kind differs, since
    a kind change starts the trace afresh), list values wrapped in a list so they are not crossed.
    A key the base has and a point lacks is always one that point's scheduler does not read, so
    its `engine.scheduler` (which differs) drops it again."""
    base_flat = _flatten({k: v for k, v in base_tree.items() if k != "variants"})
    variants = []
    for tree in point_trees:
        flat = _flatten(tree)
        new_kind = flat.get("trace.kind") != base_flat.get("trace.kind")
        variants.append({k: [v] if isinstance(v, list) else v for k, v in flat.items()
                         if k not in base_flat or base_flat[k] != v or (new_kind and k.startswith("trace."))})
    return variants


def _settings_of(point: SweepConfig) -> str:
    """A point's settings as validated (defaults filled in: a key left out and its default are
    the same point), as one comparable string."""
    return json.dumps(point.model_dump(mode="json"), sort_keys=True)


def _warn_overridden(overridden: dict[str, dict[str, list]], set_keys: dict[str, Any],
                     warn: Callable[[str], None]) -> None:
    """One warning per --set key that changed values variants set, naming each variant and value."""
    for set_key, variant_values in overridden.items():
        targets = " and ".join(f"{variant}: {', '.join(_shown(v) for v in values)})"
                               for variant, values in variant_values.items())
        warn(f"--set {set_key}={_shown(set_keys[set_key])} overrides {targets}: "
             "a --set applies to every point, after its variant")


def _warn_not_applied(not_applied: dict[str, list[str]], set_keys: dict[str, Any], num_points: int,
                      warn: Callable[[str], None]) -> None:
    """A warning per scheduler-specific --set some points do not read; ConfigError if none reads it."""
    for set_key, labels in not_applied.items():
        leaf = set_key.removeprefix("engine.")
        readers = ", ".join(s for s, keys in SCHEDULER_KEYS.items() if leaf in keys)
        if labels and len(labels) == num_points:
            raise ConfigError(f"--set {set_key}: no point's scheduler reads {leaf} (it is read by {readers}); "
                              "set engine.scheduler too, or leave it out")
        if labels:
            warn(f"--set {set_key}={_shown(set_keys[set_key])} does not apply to {' and '.join(labels)}: "
                 f"only {readers} read {leaf}")


def _shown(value: Any) -> str:
    """A value as written in YAML flow style: {engine.chunk_size: 256}, [1, 2], vllm."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_shown(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _overlaps(a: str, b: str) -> bool:
    """Whether dotted keys `a` and `b` set the same value (one is the other or inside it)."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _apply_overrides(tree: dict, combo: dict[str, Any], set_keys: dict[str, Any]) -> tuple[list, list[str]]:
    """Apply the --set keys to one point (`tree`, which already holds its variant `combo`), in place.

    Returns (the (set key, variant key) pairs whose value the --set changed, the scheduler-specific
    --set keys left out because this point's scheduler does not read them). With `engine.scheduler`
    among the --set keys every key is applied (and checked) as given.
    """
    touched = [(s, k) for s in set_keys for k in combo if _overlaps(s, k)]
    before = {k: copy.deepcopy(_get_dotted(tree, k)) for _, k in touched}
    old_kind = _get_dotted(tree, "trace.kind")
    for key, value in set_keys.items():
        _set_dotted(tree, key, value, f"--set {key}")
    _drop_unused_scheduler_keys(tree, set_keys)
    _restart_trace_on_kind_change(tree, set_keys, old_kind)
    skipped = []
    engine = tree.get("engine")
    if isinstance(engine, dict) and "engine.scheduler" not in set_keys:
        reads = SCHEDULER_KEYS.get(engine.get("scheduler", EngineConfig.model_fields["scheduler"].default), set())
        for key in set_keys:
            leaf = key.removeprefix("engine.")
            if key.startswith("engine.") and leaf in _SCHEDULER_SPECIFIC and leaf not in reads and key not in combo:
                engine.pop(leaf, None)
                skipped.append(key)
    return [(s, k) for s, k in touched if _get_dotted(tree, k) != before[k]], skipped


def _check_trace_files(points: list[tuple[dict, SweepConfig, str]], base: SweepConfig, path: Path,
                       line: int | None, qps_line: int | None = None, qps_set: bool = False) -> None:
    """ConfigError unless every point's trace file (kinds with a `path`) is set and is a file:
    caught when the config loads, not when the point runs. A variant is named only where its
    trace differs from the base's; `line` is that of the file's trace.path (None: not in the file)."""
    checked: dict[str, None] = {}  # the file traces already read by `_check_scalable`
    for _, config, where in points:
        if not hasattr(config.trace, "path") or (isinstance(config.trace, SessionsTrace) and config.trace.path is None):
            continue  # generated sessions have no file
        variant = f"{where}: " if where != "the base" and config.trace != base.trace else ""
        at = f"{path}: {variant}trace.path{f' (line {line})' if line and not variant else ''}"
        if config.trace.path is None:
            raise ConfigError(f"{at}: not set: give it in the config or with --set trace.path=FILE")
        resolved = Path(config.trace.path).expanduser()
        if not resolved.is_file():
            problem = ("is a folder, not a trace file" if resolved.is_dir() else "no such file" if not resolved.exists()
                       else "not a regular file (a FIFO, device or socket is not read: it could wait or run forever)")
            raise ConfigError(f"{at}: {problem}: {resolved}")
        if isinstance(config.trace, FileTrace) and (config.trace.qps is not None or config.search is not None):
            key = "search.qps" if config.trace.qps is None else "--set trace.qps" if qps_set else "trace.qps"
            line = qps_line if key == "trace.qps" and not variant else None
            _check_scalable(config, f"{path}: {variant}{key}{f' (line {line})' if line else ''}", checked)


def _check_scalable(config: SweepConfig, at: str, checked: dict[str, None]) -> None:
    """ConfigError unless a file trace that `trace.qps` (or a capacity search) time-scales has
    a mean rate to scale: at least two requests, not all at one instant, after its filters,
    window and max_requests (`traces.replay.scale_to_qps`). The file is read here, once per
    distinct trace of the config; a file that cannot be read is left to the point, whose error
    names its rows."""
    trace = config.trace
    if config.search is not None and trace.qps is None:  # a search's trials read search.num_requests
        trace = trace.model_copy(update={"max_requests": config.search.num_requests})
    key = trace.model_dump_json()
    if key in checked:
        return
    checked[key] = None
    try:
        requests, _ = trace.unscaled()
    except (ValueError, OSError):
        return
    arrivals_s = np.array([r.arrival_s for r in requests], dtype=float)
    if len(arrivals_s) >= 2 and arrivals_s.max() > arrivals_s.min():
        return
    held = f"{len(arrivals_s)} valid request{'' if len(arrivals_s) == 1 else 's'}" + (
        " all at one instant" if len(arrivals_s) > 1 else "")
    raise ConfigError(f"{at}: cannot time-scale the trace file {trace.path} to a QPS: it holds {held} (after its "
                      "filters, window_s and max_requests), so its mean rate is undefined; give a file with at "
                      "least two requests at different times, or drop the qps to replay it at its own times")


# Keys holding file paths: relative paths in a config file are relative to the file's folder;
# those given with --set are relative to the working directory (as a shell user expects).
_PATH_KEYS = ("trace.path", "engine.acceptance.file", "model", "engine.draft.model", "cost_model", "device")


def _resolve_paths(tree: dict, folder: Path) -> None:
    """Make the relative paths under `_PATH_KEYS` absolute against `folder`. `tree` is nested
    (a config) or flat with dotted keys (--set values); `model` is a path only if it looks like one."""
    for dotted in _PATH_KEYS:
        parent, _, leaf = dotted.rpartition(".")
        node = tree if dotted in tree else _get_dotted(tree, parent) if parent else tree
        key = dotted if dotted in tree else leaf
        value = node.get(key) if isinstance(node, dict) else None
        if not isinstance(value, str):
            continue
        if dotted == "cost_model" and value.startswith("measured:"):  # measured:DIR[,DIR...]
            node[key] = "measured:" + ",".join(_absolute(d, folder) for d in value[len("measured:"):].split(","))
            continue
        prefix = "profile:" if dotted == "cost_model" and value.startswith("profile:") else ""
        value = value[len(prefix):]
        if dotted == "cost_model" and not prefix:
            continue  # auto / roofline
        is_path = (not dotted.endswith(("model", "device")) or value.endswith((".json", ".yaml", ".yml"))
                   or "/" in value or prefix)  # a device or model name is no path
        if is_path:
            node[key] = prefix + _absolute(value, folder)


def _absolute(value: str, folder: Path) -> str:
    """`value` as a path: unchanged when absolute (after ~), else under `folder`."""
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else folder / path)


def _get_dotted(tree: dict, dotted: str):
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _drop_unused_scheduler_keys(tree: dict, explicit: dict[str, Any]) -> None:
    """When the scheduler was changed (by a variant or --set), drop the inherited keys that only
    other schedulers read; keys set explicitly alongside the change stay (and are checked)."""
    engine = tree.get("engine")
    if "engine.scheduler" not in explicit or not isinstance(engine, dict):
        return
    used = SCHEDULER_KEYS.get(engine.get("scheduler", "sarathi"), set())
    for key in _SCHEDULER_SPECIFIC - used:
        if f"engine.{key}" not in explicit:
            engine.pop(key, None)


def _restart_trace_on_kind_change(tree: dict, layer: dict[str, Any], old_kind: Any) -> None:
    """When `layer` (a variant combination or the --set keys) changed `trace.kind`, the trace starts
    afresh: only the trace keys the layer set stay. A key can mean different things in two kinds
    (`qps` samples a profile at that rate but time-scales a file), so none is inherited."""
    trace = tree.get("trace")
    if "trace.kind" not in layer or not isinstance(trace, dict) or trace.get("kind") == old_kind:
        return
    for key in list(trace):
        if not any(_overlaps(k, f"trace.{key}") for k in layer):
            del trace[key]


def validation_problems(exc: ValidationError, keyed: bool = True, root_key: str = "",
                        message: Callable[[dict], str] | None = None) -> str:
    """pydantic's errors in `exc` as one line, "key: message; key: message" (not pydantic's dump):
    each error's dotted `loc` as its key (`keyed` False: the messages alone), `root_key` for an
    error on the whole model (empty loc; "": no key), and `message(error)` as its text (default:
    pydantic's `msg` less its "Value error, " lead). Shared by `layouts_of`, `pool_point` and the
    xPyD search's layouts (`experiments.planning.disaggregation`); a config file's errors name
    lines too (`_validate`)."""
    def text(error: dict) -> str:
        said = message(error) if message is not None else error["msg"].removeprefix("Value error, ")
        key = ".".join(map(str, error["loc"])) or root_key
        return f"{key}: {said}" if keyed and key else said

    return "; ".join(text(error) for error in exc.errors())


def _validate(raw: dict, path: Path, root_node, where: str, line: int | None = None,
              set_keys: dict[str, Any] | None = None, line_keys: Iterable[str] | None = None) -> SweepConfig:
    """The validated config, or ConfigError naming each bad key with its line in the file, or
    `--set KEY` (no line) where the value came from the command line. `line` (a variant's) is
    the line of a key in `line_keys` (the dotted keys the variant sets; None: of every key); a
    key the variant does not set is named at its own line in the file (the base's)."""
    try:
        return SweepConfig.model_validate(raw)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = [str(p) for p in err["loc"] if not str(p).startswith(("function-", "tagged-union["))]
            loc = [p for p in loc if p not in TRACE_KINDS or loc[0] != "trace"]  # trace.poisson.qps: trace.qps
            key = ".".join(loc)
            message = err["msg"].replace("Value error, ", "")  # also inside a message that quotes another
            lead = re.match(r"([a-z_]+(?:\.[a-z_]+)*)(?:: | \()", message)
            sentence = re.match(r"([a-z_]+(?:\.[a-z_]+)+) ", message)  # "engine.num_gpus is 3 but ..."
            if not key and lead:  # a check across keys (SweepConfig._deployment_fits) leads with the key
                key, loc = lead[1], lead[1].split(".")
                message = message.removeprefix(f"{key}: ")
            elif not key and sentence:  # ... or is a sentence about it: the line is that key's (or its parent's)
                key, loc = sentence[1], sentence[1].split(".")
            key, loc, message = _set_key_named(key, loc, message, set_keys or {})
            own_line = line if line_keys is None or _overlapping(key, line_keys) else None
            at_line = own_line or _line_of(root_node, loc) or line
            at = f" (line {at_line})" if at_line else ""
            below = [k for k in set_keys or () if key and k.startswith(key + ".")]
            if key and any(key == k or key.startswith(k + ".") for k in set_keys or ()):  # the value --set gave
                key, at = f"--set {key}", ""
            elif below:  # a mapping of the file that --set changed a key of
                at = f" ({at.strip(' ()') + ', ' if at else ''}changed by --set {', '.join(below)})"
            if err["type"] == "extra_forbidden":
                message = unknown_key_message(SweepConfig, err["loc"])
            elif not isinstance(err.get("input"), (dict, list)) and "input" in err and ", got " not in message:
                message += f" (got {err['input']!r})"
            lines.append(f"{path}: {where}{key or '<root>'}{at}: {message}")
        raise ConfigError("\n".join(lines)) from None


def repetition_seed_problem(point: SweepConfig, seeds: int) -> str | None:
    """Why `seeds` repetitions of `point` cannot all run (repetition k runs its trace's and
    engine's seeds + k, experiments/planning/repetitions.py: one + seeds − 1 above `_MAX_SEED`,
    numpy's legacy RandomState bound), naming the key; None when they can."""
    for key, seed in (("trace.seed", getattr(point.trace, "seed", 0)), ("engine.seed", point.engine.seed)):
        if seed + seeds - 1 > _MAX_SEED:
            return (f"{key} {seed} + {seeds - 1} (repetition k uses seed + k) exceeds {_MAX_SEED}, the largest "
                    f"seed: lower {key} or the seeds")
    return None


def _overlapping(key: str, keys: Iterable[str]) -> bool:
    """Whether dotted `key` is one of `keys`, inside one, or holds one (engine / engine.chunk_size)."""
    return bool(key) and any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in keys)


def _set_key_named(key: str, loc: list[str], message: str, set_keys: dict[str, Any]) -> tuple[str, list[str], str]:
    """(key, loc, message) of an error on a mapping whose message leads with a key inside it
    ("cluster.prefill.engine" + "chunk_size: ..."): that inner key when --set gave it, so the
    error names `--set cluster.prefill.engine.chunk_size`, not the mapping's line in the file; the
    mapping's own name repeated at the message's head ("engine: ...") is dropped."""
    if not key:
        return key, loc, message
    message = message.removeprefix(f"{loc[-1]}: ") if loc else message
    inner = re.match(r"([a-z_]+(?:\.[a-z_]+)*): ", message)
    nested = f"{key}.{inner[1]}" if inner else None
    if nested and any(nested == k or nested.startswith(k + ".") for k in set_keys):
        return nested, nested.split("."), message.removeprefix(f"{inner[1]}: ")
    return key, loc, message


def _cross(variant: dict[str, Any]) -> list[dict[str, Any]]:
    keys = list(variant)
    values = [v if isinstance(v, list) else [v] for v in variant.values()]
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def _apply_variant(raw: dict, combo: dict[str, Any], where: str) -> dict:
    point = copy.deepcopy({k: v for k, v in raw.items() if k != "variants"})
    old_kind = _get_dotted(point, "trace.kind")
    for key, value in combo.items():
        _set_dotted(point, key, value, where)
    _drop_unused_scheduler_keys(point, combo)
    _restart_trace_on_kind_change(point, combo, old_kind)
    return point


def _variant_line(root_node, index: int) -> int | None:
    """1-based line of variants[index] in the YAML file (None when variants came from --set)."""
    if not isinstance(root_node, yaml.MappingNode):
        return None
    for key_node, value_node in root_node.value:
        if key_node.value == "variants" and isinstance(value_node, yaml.SequenceNode) \
                and index < len(value_node.value):
            return value_node.value[index].start_mark.line + 1
    return None


def _set_dotted(tree: dict, dotted: str, value: Any, where: str) -> None:
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{where}: {dotted}: {part} is not a mapping")
        node = child
    node[parts[-1]] = value


def _line_of(node, loc: list[str]) -> int | None:
    """1-based line of a key path in the YAML node tree, or None (e.g. a key set by --set)."""
    line = None
    for part in loc:
        if not isinstance(node, yaml.MappingNode):
            break
        for key_node, value_node in node.value:
            if key_node.value == part:
                line, node = key_node.start_mark.line + 1, value_node
                break
        else:
            break
    return line


def describe_point(point: SweepConfig) -> str:
    """Short label of a point, e.g. 'sarathi chunk=512' or 'vllm'."""
    return " ".join(text for _, text in _describe_parts(point))


# Parts of `describe_point` that qualify the deployment rather than shape it: a sweep's labels
# leave them out where every point shares them (`point_labels`: a label names what differs).
_QUALIFIER_PARTS = {"router", "policy", "gamma", "preemption"}


def _describe_parts(point: SweepConfig) -> list[tuple[str, str]]:
    """`describe_point`'s parts as (what it names, text): ('scheduler', 'sarathi'), ('chunk', 'chunk=512')..."""
    e = point.engine
    parts = [("scheduler", e.scheduler)]
    if e.scheduler in CHUNKING_SCHEDULERS:
        parts.append(("chunk", f"chunk={e.chunk_size}"))
    elif e.max_num_batched_tokens:
        parts.append(("budget", f"budget={e.max_num_batched_tokens}"))
    if e.split_n:
        parts.append(("split_n", f"N={e.split_n}"))
        if isinstance(e.draft, DraftModel):
            parts.append(("draft", f"draft={e.draft.model}"))
    for key, short in (("tensor_parallel_size", "tp"), ("pipeline_parallel_size", "pp"), ("replicas", "x"),
                       ("data_parallel_size", "dp")):
        if getattr(e, key) > 1:
            parts.append((key, f"{short}={getattr(e, key)}"))
    if e.enable_expert_parallel:
        parts.append(("ep", f"ep={e.data_parallel_size * e.tensor_parallel_size}"))
    if e.replicas > 1:
        router = e.router
        if e.router == "prefix_aware" and e.router_overlap_weight != 1:
            router += f" overlap_weight={e.router_overlap_weight:g}"
        parts.append(("router", router))
    if e.policy != "fcfs":
        parts.append(("policy", e.policy))
    if getattr(point.trace, "arrival", None) == "gamma" and point.trace.burstiness is not None:
        parts.append(("gamma", f"gamma={point.trace.burstiness:g}"))
    if e.preemption != "recompute":
        parts.append(("preemption", e.preemption))
    if point.cluster is not None:  # disaggregated: "2P3D", with each pool's TP (PP, DP, EP) when one is > 1
        pools = [(spec.replicas, spec.engine.get("tensor_parallel_size", e.tensor_parallel_size),
                  spec.engine.get("pipeline_parallel_size", e.pipeline_parallel_size),
                  spec.engine.get("data_parallel_size", e.data_parallel_size),
                  spec.engine.get("enable_expert_parallel", e.enable_expert_parallel))
                 for spec in (point.cluster.prefill, point.cluster.decode)]
        label = f"{pools[0][0]}P{pools[1][0]}D"
        for index, short in ((1, "tp"), (2, "pp"), (3, "dp")):
            if any(pool[index] > 1 for pool in pools):
                label += f" {short}={pools[0][index]}/{pools[1][index]}"
        if any(pool[4] for pool in pools):  # EP degree = DP × TP where on, 1 where off
            label += " ep=" + "/".join(str(dp * tp if ep else 1) for _, tp, _, dp, ep in pools)
        parts.append(("cluster", label))
    return parts


# Settings `describe_point` already names (or that never tell points apart).
_LABELLED_KEYS = {"name", "variants", *(f"engine.{k}" for k in (
    "scheduler", "chunk_size", "max_num_batched_tokens", "split_n", "draft", "draft.model", "tensor_parallel_size",
    "pipeline_parallel_size", "replicas", "router", "router_overlap_weight", "policy", "preemption", "data_parallel_size",
    "enable_expert_parallel")), "trace.burstiness",
    *(f"cluster.{p}.{k}" for p in ("prefill", "decode")
      for k in ("replicas", "engine.tensor_parallel_size", "engine.pipeline_parallel_size",
                "engine.data_parallel_size", "engine.enable_expert_parallel"))}


def engine_gpus(e: EngineConfig) -> int:
    """GPUs of a colocated engine: replicas × data_parallel_size × tensor_parallel_size ×
    pipeline_parallel_size (what `engine.num_gpus` is checked against and points.csv's
    `num_gpus` says, `experiments.deployment.cluster_gpus`; a cluster pool's, `pool_gpus`)."""
    return e.replicas * e.data_parallel_size * e.tensor_parallel_size * e.pipeline_parallel_size


def _check_parallel_layout(e: EngineConfig, model, check_num_gpus: bool = True, key: str = "engine",
                           pool: bool = False) -> None:
    """Data / expert parallel settings the simulator can model (simulator/data_parallel.py).
    `check_num_gpus` False: `num_gpus` counts a cluster's pools (`check_cluster`), not this engine.
    `key` names the engine in the errors; `pool`: a cluster pool's merged engine, whose replicas
    may each be a DP engine (`cluster.<pool>.replicas`, simulator/disaggregated.py).

    Raises:
        ValueError: num_gpus not DP × TP × PP (with `check_num_gpus`); expert parallelism or
            routing skew on a dense model; an EP degree above the number of experts (`profiler.moe_cost.MoELayout`); DP with
            pipeline parallelism, or with replicas outside a pool (not modelled). Each names the key and what is valid.
    """
    gpus = engine_gpus(e)
    if check_num_gpus and e.num_gpus is not None and e.num_gpus != gpus:
        raise ValueError(f"engine.num_gpus is {e.num_gpus} but replicas × data_parallel_size × tensor_parallel_size × "
                         f"pipeline_parallel_size = {e.replicas} × {e.data_parallel_size} × {e.tensor_parallel_size} × "
                         f"{e.pipeline_parallel_size} = {gpus}; make them match")
    if model.moe is None:
        for name, value in (("enable_expert_parallel", e.enable_expert_parallel), ("expert_routing_skew", e.expert_routing_skew)):
            if value:
                raise ValueError(f"{key}.{name}: {model.name} is a dense model (no experts); only a mixture of "
                                 "experts reads it")
    else:
        from profiler.moe_cost import MoELayout

        MoELayout(model.moe, e.tensor_parallel_size, e.data_parallel_size, e.enable_expert_parallel,
                  key_prefix=f"{key}.")  # a pool's keys are cluster.<pool>.engine.<key>
    if e.data_parallel_size > 1 and e.pipeline_parallel_size > 1:
        raise ValueError(f"{key}.data_parallel_size > 1 with pipeline_parallel_size > 1 is not modelled; "
                         "set one of them to 1")
    if e.data_parallel_size > 1 and model.moe is not None and (e.preemption == "swap" or isinstance(e.draft, DraftModel)):
        raise ValueError(f"{key}.data_parallel_size > 1 of a mixture of experts with preemption: swap or a draft model "
                         "is not modelled; use preemption: recompute and draft: ngram")
    if e.data_parallel_size > 1 and e.replicas > 1 and not pool:
        raise ValueError("engine.data_parallel_size > 1 with replicas > 1 is not modelled; use one data-parallel "
                         "group (replicas: 1)")


def point_labels(points: list[SweepConfig]) -> list[str]:
    """Labels of the points of one sweep: `describe_point`, plus every setting that differs
    between the points and it does not name, and without its qualifiers (`_QUALIFIER_PARTS`:
    'swap', 'priority') that every point shares. A differing model or device leads the label
    ('llama-2-70b · a100-80gb · sarathi chunk=256'); other keys follow as key=value
    ('sarathi chunk=512 max_num_seqs=64', 'vllm trace.qps=8'; file paths by their name).

    A key differs when two points that have it hold different values, or when some points lack
    it (their trace is of another kind) and a point that has it set it explicitly: a default the
    schema filled in (`trace.arrival=poisson` of a Poisson trace beside a closed loop) is no
    difference. A differing trace kind is named by the kind; a key only some kinds have is named
    only where it differs among the points of that kind ('poisson' beside 'closed_loop
    trace.clients=2' and 'closed_loop trace.clients=4'), one all kinds have wherever it differs. Devices of one name but different figures (two inline
    `h100-sxm` mappings) are told apart by the figures that differ ('device.memory_bandwidth_gb_per_s=2000').
    One point, or points differing only in what describe_point names, keep its label."""
    flat = [_flat_settings(p) for p in points]
    explicit = [_flat_settings(p, explicit_only=True) for p in points]
    keys = sorted({k for f in flat for k in f} - _LABELLED_KEYS)
    differing = [k for k in keys if _differs(k, flat, explicit)]
    kinds = [f.get("trace.kind") for f in flat]
    by_kind: dict[Any, list[str]] = {}
    if "trace.kind" in differing:  # the kind names what only some kinds have; those keys only within a kind
        differing = [k for k in differing if not k.startswith("trace.") or k == "trace.kind"
                     or all(k in f for f in flat)]
        for kind in dict.fromkeys(kinds):
            same = [i for i, k in enumerate(kinds) if k == kind]
            by_kind[kind] = [k for k in keys if k.startswith("trace.") and k != "trace.kind" and k not in differing
                             and _differs(k, [flat[i] for i in same], [explicit[i] for i in same])]
    figures = _device_figures(points, flat)
    parts = [_describe_parts(p) for p in points]
    shared = {part for part in parts[0] if part[0] in _QUALIFIER_PARTS and all(part in q for q in parts)} \
        if len(points) > 1 else set()
    labels = []
    for point_parts, settings, own, trace_kind in zip(parts, flat, figures, kinds):
        lead = [str(settings[k]) for k in ("model", "device") if k in differing]
        kind = [str(settings["trace.kind"])] if "trace.kind" in differing else []
        tail = [f"{k.removeprefix('engine.')}={_short_value(k, settings[k])}" for k in differing + by_kind.get(trace_kind, [])
                if k not in ("model", "device", "trace.kind") and k in settings
                and not (k == "trace.arrival" and settings[k] == "gamma")]  # 'gamma=γ' says it
        head = [text for part in point_parts if part not in shared for _, text in [part]]
        labels.append(" · ".join(lead + [" ".join(head + kind + tail + own)]))
    return labels


def _differs(key: str, flat: list[dict[str, Any]], explicit: list[dict[str, Any]]) -> bool:
    """Whether `key` tells the points apart (`point_labels`)."""
    values = {json.dumps(f[key], default=str, sort_keys=True) for f in flat if key in f}
    if len(values) > 1:
        return True
    return any(key not in f for f in flat) and any(key in e for e in explicit)


_DATASHEET_FIGURES = ("memory_gib", "dense_bf16_tflops", "dense_fp8_tflops", "memory_bandwidth_gb_per_s",
                      "gpu_link.kind", "gpu_link.gb_per_s_per_direction", "host_link_gb_per_s_per_direction")


def _device_figures(points: list[SweepConfig], flat: list[dict[str, Any]]) -> list[list[str]]:
    """Per point, 'device.KEY=VALUE' for the device figures (`DeviceSpec.describe`) that differ
    between points whose devices share a name; empty where the names tell the devices apart."""
    described = [_flatten(get_device_spec(p.device).describe()) for p in points]
    for d in described:
        for key in ("name", "source", "efficiency_source"):
            d.pop(key, None)
    by_name: dict[str, set[str]] = {}
    for settings, d in zip(flat, described):
        by_name.setdefault(str(settings.get("device")), set()).add(json.dumps(d, sort_keys=True, default=str))
    if all(len(specs) == 1 for specs in by_name.values()):
        return [[] for _ in points]
    keys = sorted({k for d in described for k in d})
    differing = [k for k in keys if len({json.dumps(d.get(k), default=str) for d in described}) > 1]
    # The datasheet figures a user writes say it best; else the first few efficiencies that differ.
    differing = [k for k in differing if k in _DATASHEET_FIGURES] or differing[:3]
    return [[f"device.{k}={_short_value(k, d[k])}" for k in differing if k in d] for d in described]


def _flat_settings(point: SweepConfig, explicit_only: bool = False) -> dict[str, Any]:
    """The point's settings as dotted keys; engine keys only where the point reads them: its
    scheduler's (`EngineConfig.used_settings`), acceptance and draft only with split_n (the draft
    proposes nothing without it), no engine.router or overlap weight beside `cluster:` (each
    pool has its own router: `_POINT_ONLY_ENGINE_KEYS`). So a label names no default a point does not read
    ('acceptance=0.7' of a point without drafts because another point set 0.6).
    `explicit_only`: only the keys the config set (not the defaults the schema filled in)."""
    tree = point.model_dump(mode="json", exclude_unset=explicit_only)
    read = set(point.engine.used_settings())
    if not point.engine.split_n:
        read -= {"acceptance", "draft"}
    if point.cluster is not None:
        read -= {"router", "router_overlap_weight"}
    tree["engine"] = point.engine.model_dump(mode="json", include=read, exclude_unset=explicit_only)
    flat: dict[str, Any] = {}

    if "device" in tree:  # a built-in, file or inline device by its name (a file by its path's name)
        tree["device"] = tree["device"].get("name", json.dumps(tree["device"], sort_keys=True)) \
            if isinstance(tree["device"], dict) else tree["device"]

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict) and value:
                walk(value, f"{prefix}{key}.")
            elif value is not None:
                flat[prefix + key] = value

    walk(tree, "")
    return flat


def _short_value(key: str, value: Any) -> str:
    if key.endswith(("path", "file")) and isinstance(value, str):
        return Path(value).name
    return f"{value:g}" if isinstance(value, float) else json.dumps(value) if isinstance(value, list) else str(value)


# ----- prefill/decode disaggregation (`cluster:`, simulator/disaggregated.py) -------------------
POOLS = ("prefill", "decode")


# Engine keys that hold for the whole point, never one pool: the pool sets its own replicas and
# router (`cluster.<pool>.replicas` / `.router`), no pool reads an overlap weight (its prefix_aware
# router picks the longest cached prefix, then the least outstanding: simulator/disaggregated.py
# `_PoolRouter`), and num_gpus checks every pool's GPUs together (`check_cluster`).
_POINT_ONLY_ENGINE_KEYS = ("replicas", "router", "router_overlap_weight", "num_gpus")


def pool_point(point: SweepConfig, pool: str) -> SweepConfig:
    """The point as one pool of its cluster runs it: the point's `engine:` keys (less
    `_POINT_ONLY_ENGINE_KEYS`), then the pool's `engine:` keys, its `replicas` and `router`; the
    pool's device (or the point's); no `cluster`.

    Raises:
        ValueError: the merged engine keys are invalid (named as `cluster.<pool>.engine: ...`).
    """
    spec = getattr(point.cluster, pool)
    keys = point.engine.model_dump(exclude_unset=True)
    for key in _POINT_ONLY_ENGINE_KEYS:
        keys.pop(key, None)
    keys.update(spec.engine)
    keys["replicas"] = spec.replicas
    try:
        engine = EngineConfig(**keys)
    except ValidationError as exc:
        problems = validation_problems(exc, root_key="engine", message=lambda e: (
            unknown_key_message(EngineConfig, e["loc"], _POINT_ONLY_ENGINE_KEYS) if e["type"] == "extra_forbidden"
            else e["msg"].removeprefix("Value error, ")))  # as every caller shows it (the xPyD search's layouts too)
        raise ValueError(f"cluster.{pool}.engine: {problems}") from None
    # The pool's router, set after validation: `check_cluster` checks it under its own key.
    engine = engine.model_copy(update={"router": spec.router})
    device = spec.device if spec.device is not None else point.device
    return point.model_copy(update={"engine": engine, "device": device, "cluster": None})


def pool_points(point: SweepConfig) -> dict[str, SweepConfig]:
    """Each pool of a `cluster:` point as `pool_point` makes it, by name in `POOLS` order: built
    once for the readers that take them (`pool_gpus`, `cluster_label`,
    `experiments.deployment.build_link`, ...).

    Raises:
        ValueError: as `pool_point` (not for a validated point)."""
    return {pool: pool_point(point, pool) for pool in POOLS}


def pool_gpus(point: SweepConfig, pools: dict[str, SweepConfig] | None = None) -> dict[str, int]:
    """GPUs of each pool of a `cluster:` point: replicas × data_parallel_size × tensor_parallel_size
    × pipeline_parallel_size of its `pool_point` engine (`engine_gpus`: every DP rank's GPUs).
    `pools`: the point's `pool_points` where already built."""
    pools = pool_points(point) if pools is None else pools
    return {pool: engine_gpus(pools[pool].engine) for pool in POOLS}


def cluster_label(point: SweepConfig, pools: dict[str, SweepConfig] | None = None) -> str:
    """The pools of a `cluster:` point by replicas and parallelism: "2P(TP1) 3D(TP2)", a pool's
    pipeline stages when > 1 ("1P(TP2 PP2) 2D(TP1)"), its DP ranks per instance and EP degree
    when > 1 ("1P(TP2) 2D(TP1 DP4 EP4)": two DP4 engines with expert parallelism). `pools`: the
    point's `pool_points` where already built."""
    pools = pool_points(point) if pools is None else pools
    parts = []
    for pool in POOLS:
        e = pools[pool].engine
        pp = f" PP{e.pipeline_parallel_size}" if e.pipeline_parallel_size > 1 else ""
        dp = f" DP{e.data_parallel_size}" if e.data_parallel_size > 1 else ""
        ep = f" EP{e.data_parallel_size * e.tensor_parallel_size}" if e.enable_expert_parallel else ""
        parts.append(f"{e.replicas}{pool[0].upper()}(TP{e.tensor_parallel_size}{pp}{dp}{ep})")
    return " ".join(parts)


_NO_POOL_WEIGHT = ("it applies only to a colocated engine.router: prefix_aware; a pool's prefix_aware router picks "
                   "the longest cached prefix, then the least outstanding, with no weight: remove it")


def check_cluster(point: SweepConfig) -> None:
    """What `cluster:` must satisfy before anything runs (`SweepConfig._cluster_pools`).

    Raises:
        ValueError: `engine.replicas` set beside `cluster:` (`engine.router_overlap_weight` is refused
            before validation, `SweepConfig._no_weight_beside_cluster`), `engine.data_parallel_size`
            > 1 beside it (a pool's DP is `cluster.<pool>.engine.data_parallel_size`), or
            a pool engine's replicas, router, router_overlap_weight or num_gpus
            (`_POINT_ONLY_ENGINE_KEYS`: nothing reads them there); a pool's `session_affinity`
            router without a sessions trace; a pool engine that is invalid, or whose data / expert
            parallel settings are not modelled (`_check_parallel_layout`: DP with PP, EP on a dense
            model, ...; router prefix_aware over DP instances), a TP degree the model's heads do not split into or a PP degree
            above its layers (`experiments.planning.layouts.tp_pp_problem`), an unknown pool
            device; a pool's router the pool's engine cannot serve (`check_router`, as colocated:
            prefix_aware needs vllm_v1 with prefix caching); pools whose KV cache dtypes differ; `engine.num_gpus` other than every pool's GPUs together (`pool_gpus`).
            Each names the key.
    """
    if "replicas" in point.engine.model_fields_set:
        raise ValueError("engine.replicas is not read with cluster: set cluster.prefill.replicas and "
                         "cluster.decode.replicas")
    if point.engine.data_parallel_size > 1:  # else both pools inherit it, labelled as if one DP engine ran
        raise ValueError(f"engine.data_parallel_size {point.engine.data_parallel_size} beside cluster: a pool's "
                         "instance is a DP engine by its own key: set cluster.prefill.engine.data_parallel_size "
                         "and/or cluster.decode.engine.data_parallel_size, and engine.data_parallel_size 1")
    for pool in POOLS:
        for key in _POINT_ONLY_ENGINE_KEYS:
            if key in getattr(point.cluster, pool).engine:
                raise ValueError(f"cluster.{pool}.engine.{key} is not read: " + {
                    "replicas": f"set cluster.{pool}.replicas", "router": f"set cluster.{pool}.router",
                    "router_overlap_weight": _NO_POOL_WEIGHT,
                    "num_gpus": "engine.num_gpus checks the GPUs of the whole cluster (every pool's replicas × "
                                "data_parallel_size × tensor_parallel_size × pipeline_parallel_size)"}[key])
    for pool in POOLS:
        if getattr(point.cluster, pool).router == "session_affinity" and not isinstance(point.trace, SessionsTrace):
            raise ValueError(f"cluster.{pool}.router session_affinity sends a conversation's turns to one instance: "
                             f"it needs trace kind sessions, not {point.trace.kind}")
    from experiments.planning.layouts import tp_pp_problem  # the planning layer's: imported when used

    model = get_model_spec(point.model)
    pools = {}  # each pool's point, built once, pool by pool (a pool's errors before the next pool's)
    for pool in POOLS:
        pools[pool] = pool_point(point, pool)
        e = pools[pool].engine
        # A pool's instance may be a DP engine (`cluster.<pool>.engine.data_parallel_size`), checked as a
        # colocated one is, less the one-engine rule: the pool's replicas are its instances.
        _check_parallel_layout(e, model, check_num_gpus=False, key=f"cluster.{pool}.engine", pool=True)
        if e.data_parallel_size > 1 and e.router == "prefix_aware":
            raise ValueError(f"cluster.{pool}.router prefix_aware with cluster.{pool}.engine.data_parallel_size "
                             f"{e.data_parallel_size} is not modelled: vLLM's DP balancer places a request on a rank "
                             "without reading its prefix cache; use least_outstanding, round_robin or random")
        problem = tp_pp_problem(model, e.tensor_parallel_size, e.pipeline_parallel_size)
        if problem is not None:
            raise ValueError(f"cluster.{pool}.engine.{problem[0]}: {model.name}: {problem[1]}")
        device = getattr(point.cluster, pool).device
        if device is not None:
            try:
                get_device_spec(device)
            except ValueError as exc:
                raise ValueError(f"cluster.{pool}.device: {exc}") from None
        check_router(e.router, f"cluster.{pool}.router", e, f"cluster.{pool}.engine")
    dtypes = {pool: p.engine.kv_cache_dtype for pool, p in pools.items()}
    if len(set(dtypes.values())) > 1:
        raise ValueError(f"cluster: the pools' kv_cache_dtype differ ({dtypes}); the decode pool reads the "
                         "prefill pool's KV as it is, so set one kv_cache_dtype")
    num_gpus = point.engine.num_gpus
    gpus = pool_gpus(point, pools)
    if num_gpus is not None and num_gpus != sum(gpus.values()):
        shapes = " + ".join(f"{pool} {e.replicas} × {e.data_parallel_size} × {e.tensor_parallel_size} × "
                            f"{e.pipeline_parallel_size}"
                            for pool, e in ((pool, p.engine) for pool, p in pools.items()))
        raise ValueError(f"engine.num_gpus is {num_gpus} but the cluster's pools hold {sum(gpus.values())} GPUs "
                         f"(replicas × data_parallel_size × tensor_parallel_size × pipeline_parallel_size: {shapes}); "
                         "make them match")
