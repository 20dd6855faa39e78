"""`trace:`: the workload of a point, one model per `kind:` (profile, file, poisson / synthetic,
lengths_file, closed_loop, sessions, stages), each with the `load()` or `workload()` that builds its
requests (experiments/point.py calls them)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import Field, field_validator, model_validator

import numpy as np

from experiments.config.base import _MAX_REQUESTS, _MAX_THINK_TIME_S, _Requests, _Seed, _Strict, _Tokens
from experiments.config.trace_shapes import LengthSpec, PromptPoolConfig, StageConfig, _Pooled  # noqa: F401
from traces import (ClosedLoopWorkload, LengthDistribution, Request, cut, length_distribution, lengths_with_arrivals,
                    read_lengths, read_trace, scale_to_qps, synthetic_trace, time_window)
from traces.arrivals import check_rate
from traces.length_distributions import EmpiricalLength
from traces.readers import FORMATS
from traces.readers.by_format import burstgpt_filter
from traces.sessions import SessionWorkload, read_sessions
from traces.arrivals import arrival_times_s
from traces.concurrency import StaggeredClosedLoop
from traces.generators import staged_trace
from traces.shared_prefix import with_shared_prefixes
from traces.stages import LoadStage, check_stages, stage_starts_s
from traces.time_bounds import MAX_QPS, MAX_SPAN_S, MIN_BURSTINESS, short_number
from traces.workload_profile import check_profile_name


class LengthClip(_Strict):
    """Bounds in tokens applied to lengths drawn from a profile: {min: 1, max: null}."""

    min: _Tokens = 1
    max: _Tokens | None = None

    @model_validator(mode="after")
    def _ordered(self) -> "LengthClip":
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self




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


class SyntheticTrace(_Pooled, _OpenLoop, _Lengths, _SharedPrefix):
    """Generated arrivals (poisson | gamma | constant) and lengths from any distribution, or the
    prompts of a pool (`prompts:`); optionally at most `max_concurrency` requests in flight.

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
        """traces.synthetic_trace: arrivals, then prompt and output lengths (or the pool's prompts)."""
        if self.prompts is not None:
            arrival_s = arrival_times_s(self.arrival, self.qps, self.num_requests, np.random.default_rng(self.seed),
                                        self.burstiness)
            return self.capped(self.pooled(arrival_s)), {"trace_source": f"{self.kind} {self.arrival}, prompt pool",
                                                         "trace_rows_rejected": 0}
        prompt, output = self.distributions()
        requests = self.with_prefix(
            synthetic_trace(self.num_requests, self.qps, prompt, output, self.seed, self.arrival, self.burstiness))
        return self.capped(requests), {"trace_source": f"{self.kind} {self.arrival}", "trace_rows_rejected": 0}


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
    rampup_s: float = Field(default=0.0, ge=0, le=_MAX_THINK_TIME_S)  # client k starts at k * rampup_s / clients

    def workload(self) -> ClosedLoopWorkload:
        """The request source the simulator drives (traces.ClosedLoopWorkload; with rampup_s,
        traces.concurrency.StaggeredClosedLoop: GuideLLM's `rampup_duration`)."""
        prompt, output = self.distributions()
        if self.rampup_s > 0:
            return StaggeredClosedLoop(self.clients, self.rampup_s, think_time_s=self.think_time_s, prompt=prompt,
                                       output=output, num_requests=self.num_requests, seed=self.seed)
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
        if self.rampup_s:
            raise ValueError("kind sessions starts its conversations with session_qps, not rampup_s")
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

    def workload(self, max_context_tokens: int | None = None) -> SessionWorkload:
        """The conversations the simulator drives (traces.sessions.SessionWorkload), each turn's
        prefix ids naming at most `max_context_tokens` (the engine's max_model_len) tokens."""
        if self.path is not None:
            loaded = read_sessions(Path(self.path).expanduser())
            return SessionWorkload.from_turns(loaded.conversations, self.think_time_s, self.shared_prefix_tokens,
                                              self.num_prefixes, self.seed, self.session_qps, loaded.ignored_columns,
                                              max_context_tokens)
        user, output = self.distributions()
        return SessionWorkload(self.clients, self.turns, self.think_time_s, user, output,
                               self.shared_prefix_tokens, self.num_prefixes, self.seed, self.session_qps,
                               max_context_tokens)


class StagesTrace(_Pooled, _Lengths, _SharedPrefix):
    """Load in stages (traces.stages): `stages: [{rate, duration_s[, rate_end, arrival,
    burstiness]}, ...]` back to back from 0 s, each `arrival` (constant | poisson | gamma) unless
    it names its own; lengths per request (prompt_tokens, output_tokens) or from `prompts:` (a
    pool, whose cycle restarts at each stage with `restart_prompts_per_stage`, as inference-perf's);
    optionally at most `max_concurrency` in flight. The row gets `stage<k>_*` columns."""

    kind: Literal["stages"]
    stages: list[StageConfig] = Field(min_length=1, max_length=10_000)
    arrival: Literal["poisson", "gamma", "constant"] = "poisson"
    burstiness: float | None = Field(default=None, ge=MIN_BURSTINESS)
    seed: _Seed = 0
    restart_prompts_per_stage: bool = False

    @model_validator(mode="after")
    def _stages_are_valid(self) -> "StagesTrace":
        built = [stage.stage() for stage in self.stages]  # ValueError naming the key
        check_stages(built)
        if self.request_count() > _MAX_REQUESTS:
            raise ValueError(f"the stages send about {self.request_count():.3g} requests, more than the "
                             f"{_MAX_REQUESTS:,} a trace may hold")
        for k, stage in enumerate(self.stages):
            process = stage.arrival or self.arrival
            if (stage.burstiness if stage.burstiness is not None else self.burstiness) is not None and process != "gamma":
                raise ValueError(f"stages[{k}]: burstiness applies to arrival: gamma only (this stage's is {process!r})")
        return self

    def request_count(self) -> float:
        """The stages' mean number of requests (exact for constant stages)."""
        return sum(stage.stage().expected_requests for stage in self.stages)

    def load_stages(self) -> list[LoadStage]:
        return [stage.stage() for stage in self.stages]

    def load(self) -> tuple[list[Request], dict]:
        """traces.staged_trace (arrivals stage by stage, then lengths or the pool's prompts)."""
        prompt, output = self.distributions()
        pool = self.prompts.pool(self.output_tokens, self.seed) if self.prompts is not None else None
        requests, _ = staged_trace(self.load_stages(), prompt, output, self.seed, self.arrival, self.burstiness, pool,
                                   self.restart_prompts_per_stage)
        if pool is None:
            requests = self.with_prefix(requests)
        source = f"stages {len(self.stages)} ({self.arrival}{', prompt pool' if pool else ''})"
        return self.capped(requests), {"trace_source": source, "trace_rows_rejected": 0}

    def stage_starts_s(self) -> np.ndarray:
        """Start of each stage and the profile's end, seconds, shape (K + 1,)."""
        return stage_starts_s(self.load_stages())


TraceConfig = Annotated[
    Union[ProfileTrace, FileTrace, SyntheticTrace, LengthsFileTrace, ClosedLoopTrace, SessionsTrace, StagesTrace],
    Field(discriminator="kind")
]
# Every `kind:` value; validation errors name keys without it (trace.qps, not trace.poisson.qps).
TRACE_KINDS = ("profile", "file", "poisson", "synthetic", "lengths_file", "closed_loop", "sessions", "stages")
