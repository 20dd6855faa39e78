"""The sweep config (YAML), validated: unknown keys and bad values are errors that name the key.

Schema and defaults follow DESIGN.md ("Files"). A config is one base point plus optional
`variants`: each variant is a dict of dotted keys applied to the base; a list value inside a
variant is crossed, so `{engine.scheduler: sarathi, engine.chunk_size: [256, 512]}` is two points.

Scheduler-specific keys (`SCHEDULER_KEYS`): setting a key the chosen scheduler does not use is an
error, in the layer (base or variant) that set it. A key inherited from the base by a variant
whose scheduler does not use it is dropped for that point, not an error (the base sets
`chunk_size` for sarathi; a `{engine.scheduler: vllm}` variant simply does not have one).
"""
from __future__ import annotations

import copy
import itertools
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from profiler import get_device_spec, get_model_spec
from simulator.metrics import LATENCY_METRICS, PERCENTILES
from simulator.scheduler import SCHEDULERS
from traces import (ClosedLoopWorkload, LengthDistribution, Request, cut, length_distribution, lengths_with_arrivals,
                    read_lengths, read_trace, scale_to_qps, synthetic_trace, time_window)
from traces.length_distributions import EmpiricalLength
from traces.readers import FORMATS
from traces.readers.by_format import burstgpt_filter
from traces.workload_profile import check_profile_name


class ConfigError(ValueError):
    """A config problem, already phrased for the user (file, key, what is valid)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        # YAML `true` would otherwise pass as the integer 1 (chunk_size: true -> chunk 1).
        if isinstance(data, dict):
            for key, value in data.items():
                field = cls.model_fields.get(key)
                if isinstance(value, bool) and field is not None and field.annotation is not bool:
                    raise ValueError(f"{key}: expected a number or name, got {str(value).lower()}")
        return data


class LengthClip(_Strict):
    """Bounds in tokens applied to lengths drawn from a profile: {min: 1, max: null}."""

    min: int = Field(default=1, ge=1)
    max: int | None = Field(default=None, ge=1)

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
    burstiness: float | None = Field(default=None, gt=0)  # gamma shape γ (vLLM --burstiness); 1 = Poisson

    @model_validator(mode="after")
    def _burstiness_for_gamma(self) -> "_OpenLoop":
        if self.burstiness is not None and self.arrival != "gamma":
            raise ValueError(f"burstiness applies to arrival: gamma only (arrival is {self.arrival!r})")
        return self


class _Lengths(_Strict):
    """`prompt_tokens` and `output_tokens` length specs, checked by traces.length_distribution."""

    prompt_tokens: LengthSpec = 512
    output_tokens: LengthSpec = 128

    @field_validator("prompt_tokens", "output_tokens")
    @classmethod
    def _length_spec(cls, spec: LengthSpec, info) -> LengthSpec:
        length_distribution(spec, info.field_name.removesuffix("_tokens"))  # raises ValueError, naming the problem
        return spec

    def distributions(self) -> tuple[LengthDistribution, LengthDistribution]:
        """The prompt and output distributions these specs describe."""
        return length_distribution(self.prompt_tokens, "prompt"), length_distribution(self.output_tokens, "output")


class ProfileTrace(_OpenLoop):
    """Sample a trace from a workload profile (built-in name or .json path): joint lengths, clipped."""

    kind: Literal["profile"]
    name: str
    qps: float = Field(gt=0)
    num_requests: int = Field(default=2048, ge=1)
    seed: int = 0
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
        requests = synthetic_trace(self.num_requests, self.qps, prompt, output, self.seed, self.arrival, self.burstiness)
        return requests, {"trace_source": f"profile {self.name}", "trace_rows_rejected": 0}


class FileTrace(_Strict):
    """Replay a trace file: filtered, cut to a time window and `max_requests`, time-scaled to `qps`."""

    kind: Literal["file"]
    path: str | None = None  # may be given on the command line: --set trace.path=FILE
    format: str = "auto"
    qps: float | None = Field(default=None, gt=0)
    max_requests: int | None = Field(default=None, ge=1)
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
        return window

    def load(self) -> tuple[list[Request], dict]:
        """Read (lenient unless strict), filter, window, cut to max_requests, then scale to qps."""
        if self.path is None:
            raise ValueError("trace.path is not set: give it in the config or with --set trace.path=FILE")
        loaded = read_trace(Path(self.path).expanduser(), format=self.format, strict=self.strict,
                            where=burstgpt_filter(self.models, self.log_types))
        requests = loaded.requests
        if self.window_s is not None:
            requests = time_window(requests, *self.window_s)
        if self.max_requests is not None:
            requests = cut(requests, max_requests=self.max_requests)
        if self.qps is not None:
            requests = scale_to_qps(requests, self.qps)
        return requests, {"trace_source": str(self.path), "trace_rows_rejected": loaded.num_rejected,
                          "trace_rows_rejected_detail": "; ".join(line.strip() for line in loaded.report_lines())}


class SyntheticTrace(_OpenLoop, _Lengths):
    """Generated arrivals (poisson | gamma | constant) and lengths from any distribution.

    `kind: poisson` is this kind with Poisson arrivals (the first name it had).
    """

    kind: Literal["poisson", "synthetic"]
    qps: float = Field(gt=0)
    num_requests: int = Field(default=2048, ge=1)
    seed: int = 0

    @model_validator(mode="after")
    def _poisson_kind(self) -> "SyntheticTrace":
        if self.kind == "poisson" and self.arrival != "poisson":
            raise ValueError(f"kind poisson has Poisson arrivals; for arrival: {self.arrival} use kind: synthetic")
        return self

    def load(self) -> tuple[list[Request], dict]:
        """traces.synthetic_trace: arrivals, then prompt and output lengths."""
        prompt, output = self.distributions()
        requests = synthetic_trace(self.num_requests, self.qps, prompt, output, self.seed, self.arrival, self.burstiness)
        return requests, {"trace_source": f"{self.kind} {self.arrival}", "trace_rows_rejected": 0}


class LengthsFileTrace(_OpenLoop):
    """A lengths-only file (`*_stats_*.csv`) in file order, arriving by a generated process at `qps`."""

    kind: Literal["lengths_file"]
    path: str | None = None
    qps: float = Field(gt=0)
    max_requests: int | None = Field(default=None, ge=1)
    strict: bool = False
    seed: int = 0

    def load(self) -> tuple[list[Request], dict]:
        """Row i (of the valid rows, at most max_requests) is request i (traces.lengths_with_arrivals)."""
        if self.path is None:
            raise ValueError("trace.path is not set: give it in the config or with --set trace.path=FILE")
        loaded = read_lengths(Path(self.path).expanduser(), strict=self.strict)
        rows = slice(None, self.max_requests)
        requests = lengths_with_arrivals(loaded.prompt_tokens[rows], loaded.output_tokens[rows], self.qps,
                                         self.seed, self.arrival, self.burstiness)
        return requests, {"trace_source": str(self.path), "trace_rows_rejected": loaded.num_rejected,
                          "trace_rows_rejected_detail": "; ".join(line.strip() for line in loaded.report_lines())}


class ClosedLoopTrace(_Lengths):
    """`clients` concurrent clients; each sends its next request `think_time_s` after one completes."""

    kind: Literal["closed_loop"]
    clients: int = Field(ge=1)
    think_time_s: float = Field(default=0.0, ge=0)
    num_requests: int = Field(default=2048, ge=1)
    seed: int = 0

    def workload(self) -> ClosedLoopWorkload:
        """The request source the simulator drives (traces.ClosedLoopWorkload)."""
        prompt, output = self.distributions()
        return ClosedLoopWorkload(self.clients, self.think_time_s, prompt, output, self.num_requests, self.seed)


TraceConfig = Annotated[
    Union[ProfileTrace, FileTrace, SyntheticTrace, LengthsFileTrace, ClosedLoopTrace], Field(discriminator="kind")
]
# Every `kind:` value; validation errors name keys without it (trace.qps, not trace.poisson.qps).
TRACE_KINDS = ("profile", "file", "poisson", "synthetic", "lengths_file", "closed_loop")


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
    chunk_size: int = Field(default=512, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    long_prefill_token_threshold: int | None = Field(default=None, ge=1)
    max_num_seqs: int = Field(default=128, ge=1)
    max_model_len: int | None = Field(default=None, ge=2)
    block_size: int = Field(default=16, ge=1, le=256)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    num_gpu_blocks: int | None = Field(default=None, ge=1)
    dtype: Literal["bf16", "fp8"] = "bf16"
    kv_cache_dtype: Literal["bf16", "fp8"] = "bf16"
    tensor_parallel_size: int = Field(default=1, ge=1)
    pipeline_parallel_size: int = Field(default=1, ge=1)
    replicas: int = Field(default=1, ge=1)
    router: Literal["round_robin", "least_outstanding", "random"] = "round_robin"
    preemption: Literal["recompute", "swap"] = "recompute"
    policy: Literal["fcfs", "priority"] = "fcfs"
    split_n: int = Field(default=0, ge=0, le=64)
    acceptance: Annotated[float, Field(ge=0, le=1)] | list[Annotated[float, Field(ge=0, le=1)]] | AcceptanceFile = 0.7
    draft: Literal["ngram"] | DraftModel = "ngram"
    seed: int = 0
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
            raise ValueError(f"acceptance must be {valid}; got {value!r}")
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
        """The settings this point's scheduler actually reads, as table cells (for CSV/Parquet
        columns: lists and mappings such as `acceptance` or `draft` become JSON text)."""
        return {k: json.dumps(v) if isinstance(v, (dict, list)) else v
                for k, v in self.model_dump(mode="json").items()
                if k not in _SCHEDULER_SPECIFIC or k in SCHEDULER_KEYS[self.scheduler]}


class SearchConfig(_Strict):
    """Capacity search per point (experiments/planning/capacity.py): bisection on QPS within `qps`.

    Each trial simulates `num_requests` at one QPS; warm-up and drain (`trim_fraction` of the
    arrival span at each end) are left out of the latency statistics; the search repeats for
    `seeds` seeds (trace sampling and acceptance) for a confidence interval.
    """

    qps: tuple[float, float] = (0.5, 64.0)
    precision: float = Field(default=0.025, gt=0, lt=1)
    num_requests: int = Field(default=2048, ge=10)
    seeds: int = Field(default=3, ge=1, le=20)
    trim_fraction: float = Field(default=0.1, ge=0, lt=0.5)
    max_trials: int = Field(default=20, ge=2, le=60)
    loads: list[Annotated[float, Field(gt=0)]] = []  # QPS grid for the load-dependent policy table

    @field_validator("qps")
    @classmethod
    def _bracket(cls, qps: tuple[float, float]) -> tuple[float, float]:
        if not 0 < qps[0] < qps[1] < float("inf"):
            raise ValueError(f"search.qps must be [low, high] with 0 < low < high, got {list(qps)}")
        return qps


class FleetConfig(_Strict):
    """Fleet sizing from a capacity search: replicas of each point needed for `target_qps`, and
    the cost per million output tokens at `gpu_hour_usd` per GPU-hour."""

    target_qps: float = Field(gt=0)
    gpu_hour_usd: float | None = Field(default=None, gt=0)


_SLO_KEY = re.compile(r"^(?P<metric>[a-z_]+?)_p(?P<pct>\d+(?:\.\d+)?)_s$")


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

    @model_validator(mode="after")
    def _fleet_needs_search(self) -> "SweepConfig":
        if self.fleet is not None and self.search is None:
            raise ValueError("fleet: sizing needs a capacity search; add search: {...}")
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
            get_device_spec(self.device)
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
                raise ValueError(f"SLO {key} must be > 0 seconds, got {value}")
        return slo

    @field_validator("goodput")
    @classmethod
    def _goodput_keys(cls, goodput: dict[str, float]) -> dict[str, float]:
        valid = {"ttft_s", "tpot_s", "e2e_s"}
        for key in goodput:
            if key not in valid:
                raise ValueError(f"bad goodput key {key!r}; valid: {', '.join(sorted(valid))}")
        return goodput


def slo_summary_key(slo_key: str) -> str:
    """'tbt_p99_s' -> the summary column 'tbt_s_p99'."""
    m = _SLO_KEY.match(slo_key)
    return f"{m['metric']}_s_p{float(m['pct']):g}"


# ----- loading -------------------------------------------------------------------------------

def load_config(path: str | Path, overrides: list[str] = ()) -> tuple[SweepConfig, list[dict[str, Any]]]:
    """Read, override and validate a config file; expand its variants.

    Args:
        path: the YAML file.
        overrides: "dotted.key=value" strings (value parsed as YAML), applied before validation.

    Returns:
        (base config, list of point dicts ready for `SweepConfig.model_validate`, one per point).

    Raises:
        ConfigError: with the file, the key (and its line where known) and what is valid.
    """
    path = Path(path)
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
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys (name, model, trace, engine, ...)")
    _resolve_paths(raw, path.resolve().parent)
    set_keys = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected dotted.key=value, e.g. --set trace.path=conv.csv")
        set_keys[key.strip()] = yaml.safe_load(value)
    _resolve_paths(set_keys, Path.cwd())
    for key, value in set_keys.items():
        _set_dotted(raw, key, value, f"--set {key}")
    _drop_unused_scheduler_keys(raw, set_keys)

    base = _validate(raw, path, root_node, where="")
    points = []
    for index, variant in enumerate(raw.get("variants") or [{}]):
        if not isinstance(variant, dict):
            raise ConfigError(f"{path}: variants[{index}] must be a mapping of dotted keys, got {variant!r}")
        empty = [k for k, v in variant.items() if v == []]
        if empty:
            raise ConfigError(f"{path}: variants[{index}] {empty[0]}: an empty list gives no points; "
                              "list at least one value")
        line = _variant_line(root_node, index)
        for combo in _cross(variant):
            point = _apply_variant(raw, combo, f"{path}: variants[{index}]")
            _resolve_paths(point, path.resolve().parent)
            _validate(point, path, root_node, where=f"variants[{index}] {combo}: ", line=line)
            points.append(point)
    return base, points


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
        prefix = "profile:" if dotted == "cost_model" and value.startswith("profile:") else ""
        value = value[len(prefix):]
        if dotted == "cost_model" and not prefix:
            continue  # auto / roofline
        is_path = (not dotted.endswith(("model", "device")) or value.endswith((".json", ".yaml", ".yml"))
                   or "/" in value or prefix)  # a device or model name is no path
        if is_path and not Path(value).expanduser().is_absolute():
            node[key] = prefix + str(folder / Path(value).expanduser())


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


def _validate(raw: dict, path: Path, root_node, where: str, line: int | None = None) -> SweepConfig:
    try:
        return SweepConfig.model_validate(raw)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = [str(p) for p in err["loc"] if not str(p).startswith(("function-", "tagged-union["))]
            key = ".".join(p for p in loc if p not in TRACE_KINDS or loc[0] != "trace")
            at_line = line or _line_of(root_node, loc)
            at = f" (line {at_line})" if at_line else ""
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = "unknown key"
            elif not isinstance(err.get("input"), (dict, list)) and "input" in err:
                message += f" (got {err['input']!r})"
            lines.append(f"{path}: {where}{key or '<root>'}{at}: {message}")
        raise ConfigError("\n".join(lines)) from None


def _cross(variant: dict[str, Any]) -> list[dict[str, Any]]:
    keys = list(variant)
    values = [v if isinstance(v, list) else [v] for v in variant.values()]
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def _apply_variant(raw: dict, combo: dict[str, Any], where: str) -> dict:
    point = copy.deepcopy({k: v for k, v in raw.items() if k != "variants"})
    for key, value in combo.items():
        _set_dotted(point, key, value, where)
    _drop_unused_scheduler_keys(point, combo)
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
    e = point.engine
    parts = [e.scheduler]
    if e.scheduler in CHUNKING_SCHEDULERS:
        parts.append(f"chunk={e.chunk_size}")
    elif e.max_num_batched_tokens:
        parts.append(f"budget={e.max_num_batched_tokens}")
    if e.split_n:
        parts.append(f"N={e.split_n}")
        if isinstance(e.draft, DraftModel):
            parts.append(f"draft={e.draft.model}")
    for key, short in (("tensor_parallel_size", "tp"), ("pipeline_parallel_size", "pp"), ("replicas", "x")):
        if getattr(e, key) > 1:
            parts.append(f"{short}={getattr(e, key)}")
    if e.replicas > 1:
        parts.append(e.router)
    if e.policy != "fcfs":
        parts.append(e.policy)
    if getattr(point.trace, "arrival", None) == "gamma" and point.trace.burstiness is not None:
        parts.append(f"gamma={point.trace.burstiness:g}")
    if e.preemption != "recompute":
        parts.append(e.preemption)
    return " ".join(parts)


# Settings `describe_point` already names (or that never tell points apart).
_LABELLED_KEYS = {"name", "variants", *(f"engine.{k}" for k in (
    "scheduler", "chunk_size", "max_num_batched_tokens", "split_n", "draft", "draft.model", "tensor_parallel_size",
    "pipeline_parallel_size", "replicas", "router", "policy", "preemption")), "trace.burstiness"}


def point_labels(points: list[SweepConfig]) -> list[str]:
    """Labels of the points of one sweep: `describe_point`, plus every setting that differs
    between the points and it does not name. A differing model or device leads the label
    ('llama-2-70b · a100-80gb · sarathi chunk=256'); other keys follow as key=value
    ('sarathi chunk=512 max_num_seqs=64', 'vllm trace.qps=8'; file paths by their name).
    One point, or points differing only in what describe_point names, keep its label."""
    flat = [_flat_settings(p) for p in points]
    keys = sorted({k for f in flat for k in f} - _LABELLED_KEYS)
    differing = [k for k in keys if len({json.dumps(f.get(k), default=str) for f in flat}) > 1]
    labels = []
    for point, settings in zip(points, flat):
        lead = [str(settings[k]) for k in ("model", "device") if k in differing]
        tail = [f"{k.removeprefix('engine.')}={_short_value(k, settings[k])}" for k in differing
                if k not in ("model", "device") and k in settings
                and not (k == "trace.arrival" and settings[k] == "gamma")]  # 'gamma=γ' says it
        labels.append(" · ".join(lead + [" ".join([describe_point(point)] + tail)]))
    return labels


def _flat_settings(point: SweepConfig) -> dict[str, Any]:
    """The point's settings as dotted keys; engine keys only where its scheduler reads them."""
    tree = point.model_dump(mode="json")
    tree["engine"] = point.engine.model_dump(mode="json", include=set(point.engine.used_settings()))
    flat: dict[str, Any] = {}

    if isinstance(tree.get("device"), dict):  # an inline device mapping: by its name
        tree["device"] = tree["device"].get("name", json.dumps(tree["device"], sort_keys=True))

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
