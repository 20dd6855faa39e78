"""The parallel layouts of a GPU count: what a config's `layouts: {gpus: N}` crosses every point with.

A layout is one way to serve a model on exactly N GPUs, in vLLM's flag names (`engine.` keys):
`tensor_parallel_size` (TP), `pipeline_parallel_size` (PP), `data_parallel_size` (DP),
`enable_expert_parallel` (EP = DP × TP, vLLM `FusedMoEParallelConfig.make`,
vllm/model_executor/layers/fused_moe/config.py) and `replicas` (independent engines behind the
point's router). Which ones are enumerated follows what the simulator models:

- a mixture of experts: one data-parallel group, TP × DP = N, each with expert parallelism off
  (each expert's width split over the N GPUs) and on (the experts split over EP = N GPUs); and,
  with `replicas: true`, N / TP replicas of a DP-1 engine of TP GPUs (EP = TP when on): unlike DP
  ranks, replicas neither share experts nor step in lockstep. An MoE is not pipelined here, and
  DP groups are not replicated (`_check_parallel_layout` refuses DP with replicas or PP);
- a dense model: one engine of TP × PP × DP = N, DP > 1 only without PP (not modelled together).
  vLLM runs a dense model's DP ranks as independent engines behind its DP load balancer
  (vllm/v1/engine/core.py `run_engine_core`: "Non-MoE DP ranks are completely independent, so
  treat like DP=1"; `simulator.simulate` does the same), so replicas add only what DP cannot
  express: with `replicas: true`, N / (TP × PP) replicas of a pipelined engine (PP > 1).

A candidate the model cannot take is skipped with the reason (`enumerate_layouts`), never
silently: TP must divide the attention heads and TP and the KV heads one another
(`ModelSpec.kv_heads_per_rank`, vLLM's `QKVParallelLinear`), PP at most the layers, and for an
MoE the EP degree must be at most the experts (vLLM gives a remainder to the first ranks) and,
without EP, the MoE TP degree (DP × TP) must divide the expert width
(`profiler.moe_cost.MoELayout`). `experiments.config.layouts_of` then skips, the same way, the
layouts the point's other settings rule out (a DP group with KV swaps or a draft model).
Whether the weights fit a GPU is not checked here: a layout that does not fit fails as its point,
with the memory error, in the report.
"""
from __future__ import annotations

from dataclasses import dataclass

from profiler.model_spec import ModelSpec

# Enough for a multi-node deployment; each layout is a point (a simulation or a capacity search).
MAX_LAYOUT_GPUS = 1024
LAYOUT_KEYS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "enable_expert_parallel",
               "replicas", "num_gpus")  # the engine keys a layout sets (num_gpus: the check it makes moot)


@dataclass(frozen=True)
class Layout:
    """One parallel layout (module docstring); `gpus` = replicas × DP × TP × PP."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    replicas: int = 1

    @property
    def gpus(self) -> int:
        return self.replicas * self.data_parallel_size * self.tensor_parallel_size * self.pipeline_parallel_size

    def engine_keys(self) -> dict[str, int | bool]:
        """The layout as dotted `engine.` keys (a variant's form)."""
        return {f"engine.{key}": getattr(self, key) for key in LAYOUT_KEYS if key != "num_gpus"}

    def text(self) -> str:
        """'TP 2 × DP 2, EP 4', '2 × (TP 4 × PP 1)': how the report names it."""
        parts = [f"TP {self.tensor_parallel_size}"]
        if self.pipeline_parallel_size > 1:
            parts.append(f"PP {self.pipeline_parallel_size}")
        if self.data_parallel_size > 1:
            parts.append(f"DP {self.data_parallel_size}")
        engine = " × ".join(parts)
        if self.enable_expert_parallel:
            engine += f", EP {self.data_parallel_size * self.tensor_parallel_size}"
        return f"{self.replicas} × ({engine})" if self.replicas > 1 else engine


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidate_layouts(model: ModelSpec, gpus: int, replicas: bool = True) -> list[Layout]:
    """Every layout of exactly `gpus` GPUs of the shapes the module docstring lists, valid or not,
    in a fixed order (one engine before replicas; then by TP, then EP off before on)."""
    found: list[Layout] = []
    if model.moe is not None:
        for tp in _divisors(gpus):  # one DP group: DP × TP = gpus
            for ep in ((False, True) if gpus > 1 else (False,)):  # EP 1 is no expert parallelism
                found.append(Layout(tensor_parallel_size=tp, data_parallel_size=gpus // tp, enable_expert_parallel=ep))
        if replicas:
            for tp in _divisors(gpus)[:-1]:  # replicas > 1 of a DP-1 engine of TP GPUs
                for ep in ((False, True) if tp > 1 else (False,)):
                    found.append(Layout(tensor_parallel_size=tp, enable_expert_parallel=ep, replicas=gpus // tp))
        return found
    for tp in _divisors(gpus):  # one engine: TP × PP × DP = gpus, DP only at PP 1
        for dp in _divisors(gpus // tp):
            pp = gpus // tp // dp
            if dp == 1 or pp == 1:
                found.append(Layout(tensor_parallel_size=tp, pipeline_parallel_size=pp, data_parallel_size=dp))
    if replicas:
        for copies in _divisors(gpus)[1:]:  # replicas > 1 of a pipelined engine
            for tp in _divisors(gpus // copies):
                if gpus // copies // tp > 1:
                    found.append(Layout(tensor_parallel_size=tp, pipeline_parallel_size=gpus // copies // tp,
                                        replicas=copies))
    return found


def tp_pp_problem(model: ModelSpec, tensor_parallel_size: int, pipeline_parallel_size: int) -> tuple[str, str] | None:
    """(the engine key at fault, why) when `model` cannot be split into TP × PP (its heads by TP,
    `ModelSpec.kv_heads_per_rank`; at most one stage per layer), or None when it can. Shared by
    `layout_problem`, a cluster's pools (`experiments.config.check_cluster`) and the xPyD search's
    instance shapes (`experiments.planning.disaggregation.layouts`)."""
    try:
        model.kv_heads_per_rank(tensor_parallel_size)
    except ValueError as exc:
        return "tensor_parallel_size", str(exc).removeprefix(f"model {model.name!r}: ")
    if pipeline_parallel_size > model.num_layers:
        return ("pipeline_parallel_size",
                f"pipeline_parallel_size {pipeline_parallel_size} exceeds the model's {model.num_layers} layers")
    return None


def layout_problem(model: ModelSpec, layout: Layout) -> str | None:
    """Why `model` cannot be served in `layout` (module docstring), or None when it can."""
    problem = tp_pp_problem(model, layout.tensor_parallel_size, layout.pipeline_parallel_size)
    if problem is not None:
        return problem[1]
    if model.moe is not None:
        from profiler.moe_cost import MoELayout

        try:
            MoELayout(model.moe, layout.tensor_parallel_size, layout.data_parallel_size, layout.enable_expert_parallel,
                      key_prefix="")
        except ValueError as exc:
            return str(exc)
    return None


def enumerate_layouts(model: ModelSpec, gpus: int, replicas: bool = True) -> tuple[list[Layout], list[tuple[Layout, str]]]:
    """(the valid layouts of `gpus` GPUs, the skipped ones with why), each in `candidate_layouts` order.

    Raises:
        ValueError: `gpus` not an integer in [1, MAX_LAYOUT_GPUS]; no valid layout (the message
            gives each candidate's reason and the GPU counts up to 64 that have one).
    """
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_LAYOUT_GPUS:
        raise ValueError(f"layouts.gpus must be an integer from 1 to {MAX_LAYOUT_GPUS}, got {gpus!r}")
    valid, skipped = [], []
    for layout in candidate_layouts(model, gpus, replicas):
        problem = layout_problem(model, layout)
        if problem is None:
            valid.append(layout)
        else:
            skipped.append((layout, problem))
    if not valid:
        counts = [n for n in range(1, 65) if any(layout_problem(model, c) is None
                                                  for c in candidate_layouts(model, n, replicas))]
        reasons = "; ".join(f"{layout.text()}: {why}" for layout, why in skipped)
        raise ValueError(f"layouts.gpus: no layout of {gpus} GPUs can serve {model.name}"
                         f"{'' if replicas else ' as one engine (layouts.replicas: false)'} ({reasons}); "
                         f"GPU counts up to 64 with one: {', '.join(map(str, counts)) or 'none'}")
    return valid, skipped
