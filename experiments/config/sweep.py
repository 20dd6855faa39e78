"""The whole config file (`SweepConfig`): its top-level keys (`name`, `model`, `device`,
`cost_model`, `trace`, `engine`, `frontend`, `step_variance`, `variants`, `slo`, `goodput`, `search`, `fleet`, `output`,
`cluster`, `layouts`) and the checks across blocks. Each block's own keys are validated in the
file of its name (`trace.py`, `engine.py`, ...); `model`, `device` and `cost_model` and how the
engine fits them in `model_and_device.py`."""
from __future__ import annotations

from typing import Any

from pydantic import field_validator, model_validator

from experiments.config.base import _Strict
from experiments.config.cluster import _NO_POOL_WEIGHT, ClusterConfig, check_cluster
from experiments.config.engine import EngineConfig
from experiments.config.fleet import FleetConfig, price_problem
from experiments.config.frontend import FrontendConfig
from experiments.config.layouts import LayoutsConfig
from experiments.config.model_and_device import check_deployment
from experiments.config.output import OutputConfig
from experiments.config.search import SearchConfig, repetition_seed_problem
from experiments.config.slo import check_goodput, check_slo
from experiments.config.step_variance import StepVarianceConfig
from experiments.config.trace import SessionsTrace, TraceConfig
from profiler import get_model_spec


class SweepConfig(_Strict):
    """A whole config file: one base point, its variants, SLOs and goodput thresholds."""

    name: str = "sweep"
    model: str = "llama-3-8b"
    device: str | dict[str, Any] = "h100-sxm"  # built-in name, device YAML file or inline mapping
    cost_model: str = "auto"
    trace: TraceConfig
    engine: EngineConfig = EngineConfig()
    frontend: FrontendConfig = FrontendConfig()
    step_variance: StepVarianceConfig = StepVarianceConfig()
    variants: list[dict[str, Any]] = []
    slo: dict[str, float] = {}
    goodput: dict[str, float] = {}
    search: SearchConfig | None = None
    fleet: FleetConfig | None = None
    output: OutputConfig = OutputConfig()
    cluster: ClusterConfig | None = None  # prefill/decode disaggregation; none: colocated replicas
    layouts: LayoutsConfig | None = None  # cross every point with every TP × DP × EP (or TP × PP) layout of N GPUs

    @model_validator(mode="after")
    def _cluster_without_frontend(self) -> "SweepConfig":
        if self.cluster is not None:
            if self.frontend.enabled:
                raise ValueError("frontend.enabled true with cluster: the serving front end is not modelled in "
                                 "prefill/decode pools; remove it (the cluster's times are the engines')")
            if self.engine.async_scheduling:
                raise ValueError("engine.async_scheduling true with cluster: async scheduling is not modelled in "
                                 "prefill/decode pools; set it false or leave it unset")
        if self.step_variance.cv > 0 and (self.cluster is not None or self.engine.pipeline_parallel_size > 1):
            raise ValueError("step_variance.cv > 0 with " + ("cluster:" if self.cluster is not None else
                             "engine.pipeline_parallel_size > 1") + ": step-time variance is not modelled there; "
                             "set step_variance.cv 0")
        return self

    @model_validator(mode="after")
    def _vllm_defaults(self) -> "SweepConfig":
        # vllm_v1's unset token budget and max_num_seqs are vLLM's for the point's card
        # (experiments.vllm_defaults); a name that does not resolve is reported by _deployment_fits.
        if self.engine.scheduler != "vllm_v1":
            return self
        from experiments.vllm_defaults import with_vllm_defaults
        from profiler import get_device_spec
        try:
            device, model = get_device_spec(self.device), get_model_spec(self.model)
        except (ValueError, OSError):
            return self
        try:
            engine = with_vllm_defaults(self.engine, device, model.max_model_len)
        except ValueError as exc:
            raise ValueError(str(exc).removeprefix("Value error, ")) from None
        object.__setattr__(self, "engine", engine)  # frozen: the resolved engine replaces the validated one
        return self

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
        problem = price_problem(self)
        if problem is not None:
            raise ValueError(problem)
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
        """Names and shapes checked before any point runs: model, device, TP split, context
        (`model_and_device.check_deployment`)."""
        check_deployment(self)
        return self

    @field_validator("slo")
    @classmethod
    def _slo_keys(cls, slo: dict[str, float]) -> dict[str, float]:
        check_slo(slo)
        return slo

    @field_validator("goodput")
    @classmethod
    def _goodput_keys(cls, goodput: dict[str, float]) -> dict[str, float]:
        check_goodput(goodput)
        return goodput
