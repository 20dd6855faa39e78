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

from simulator.metrics import LATENCY_METRICS, PERCENTILES
from simulator.scheduler import SCHEDULERS


class ConfigError(ValueError):
    """A config problem, already phrased for the user (file, key, what is valid)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProfileTrace(_Strict):
    """Sample a trace from a built-in workload profile (`traces/profiles/*.json`)."""

    kind: Literal["profile"]
    name: str
    qps: float = Field(gt=0)
    num_requests: int = Field(default=2048, ge=1)
    seed: int = 0


class FileTrace(_Strict):
    """Replay a trace file; optionally time-scaled to `qps` and cut to `max_requests`."""

    kind: Literal["file"]
    path: str | None = None  # may be given on the command line: --set trace.path=FILE
    format: str = "auto"
    qps: float | None = Field(default=None, gt=0)
    max_requests: int | None = Field(default=None, ge=1)
    strict: bool = False


class PoissonTrace(_Strict):
    """Poisson arrivals with fixed (int) or uniform ([low, high], inclusive) lengths."""

    kind: Literal["poisson"]
    qps: float = Field(gt=0)
    num_requests: int = Field(default=2048, ge=1)
    prompt_tokens: int | tuple[int, int] = 512
    output_tokens: int | tuple[int, int] = 128
    seed: int = 0


TraceConfig = Annotated[Union[ProfileTrace, FileTrace, PoissonTrace], Field(discriminator="kind")]


# Keys that only some schedulers read; every other engine key applies to all of them.
CHUNKING_SCHEDULERS = ("sarathi", "vllm_v1", "simple_chunking", "fastgen")
SCHEDULER_KEYS: dict[str, set[str]] = {
    **{name: {"chunk_size"} for name in CHUNKING_SCHEDULERS},
    **{name: {"max_num_batched_tokens"} for name in ("vllm", "orca", "faster_transformer")},
}
SCHEDULER_KEYS["vllm_v1"] = {"chunk_size", "long_prefill_token_threshold"}
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
    block_size: int = Field(default=16, ge=1)
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


_SLO_KEY = re.compile(r"^(?P<metric>[a-z_]+?)_p(?P<pct>\d+(?:\.\d+)?)_s$")


class SweepConfig(_Strict):
    """A whole config file: one base point, its variants, SLOs and goodput thresholds."""

    name: str = "sweep"
    model: str = "llama-3-8b"
    device: str = "h100-sxm"
    cost_model: str = "auto"
    trace: TraceConfig
    engine: EngineConfig = EngineConfig()
    variants: list[dict[str, Any]] = []
    slo: dict[str, float] = {}
    goodput: dict[str, float] = {}

    @field_validator("cost_model")
    @classmethod
    def _cost_model(cls, value: str) -> str:
        if value not in ("auto", "roofline"):
            raise ValueError(
                f"cost_model {value!r} is not available yet; valid: auto, roofline "
                "(measured profiles arrive with the calibration work)"
            )
        return value

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
    try:
        raw = yaml.safe_load(text) or {}
        root_node = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys (name, model, trace, engine, ...)")
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected dotted.key=value, e.g. --set trace.path=conv.csv")
        _set_dotted(raw, key.strip(), yaml.safe_load(value), f"--set {item!r}")

    base = _validate(raw, path, root_node, where="")
    points = []
    for index, variant in enumerate(raw.get("variants") or [{}]):
        if not isinstance(variant, dict):
            raise ConfigError(f"{path}: variants[{index}] must be a mapping of dotted keys, got {variant!r}")
        for combo in _cross(variant):
            point = _apply_variant(raw, combo, f"{path}: variants[{index}]")
            _validate(point, path, root_node, where=f"variants[{index}] {combo}: ")
            points.append(point)
    return base, points


def _validate(raw: dict, path: Path, root_node, where: str) -> SweepConfig:
    try:
        return SweepConfig.model_validate(raw)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = [str(p) for p in err["loc"] if not str(p).startswith(("function-", "tagged-union["))]
            key = ".".join(p for p in loc if p not in ("profile", "file", "poisson") or loc[0] != "trace")
            line = _line_of(root_node, loc)
            at = f" (line {line})" if line else ""
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
    engine = point.setdefault("engine", {})
    scheduler = engine.get("scheduler", "sarathi")
    if isinstance(engine, dict) and "engine.scheduler" in combo:
        # Inherited scheduler-specific keys the variant's scheduler does not read are dropped.
        for key in _SCHEDULER_SPECIFIC - SCHEDULER_KEYS.get(scheduler, set()):
            if f"engine.{key}" not in combo:
                engine.pop(key, None)
    return point


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
    if e.preemption != "recompute":
        parts.append(e.preemption)
    return " ".join(parts)
