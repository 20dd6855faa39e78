"""Pricing mixture-of-experts models: the MoE block of every layer on top of a dense cost model of
the rest, under tensor, expert and data parallelism (issue 18).

A step of an MoE model is, per layer (vLLM `Qwen3MoeDecoderLayer` / `MixtralDecoderLayer`,
`vllm/model_executor/models/{qwen3_moe,mixtral}.py`): the attention block, priced by the dense
cost model (`RooflineCostModel` or `MeasuredCostModel`: for an MoE `ModelSpec` they price
`qkv_proj`, `o_proj`, attention and the element-wise kernels, not an MLP), then the sparse block,
priced here (`MoEBlockCost`):

- the router: a GEMM of T × hidden × num_experts and its top-k softmax (one element-wise kernel
  over T × num_experts fp32 logits);
- the experts (vLLM `FusedMoE`, `fused_experts`): from AIConfigurator's measured `moe` table at the
  model's (hidden, width, top-k, experts), the MoE TP and EP degrees and the routing distribution,
  interpolated log-log over the tokens entering the layer and roofline-scaled past its ends; on a
  device without that table, the roofline: the weights of the experts the routing activates on the
  rank (`MoESpec.expected_active_experts`) and 2 FLOPs per weight per local token–expert pair;
- Qwen2-MoE's shared expert: two dense GEMMs (gate_up, down) at the MoE TP degree.

Parallel layout (vLLM `FusedMoEParallelConfig.make`, vllm/model_executor/layers/fused_moe/config.py):
the MoE layers span all DP × TP GPUs. With `enable_expert_parallel` the experts are split over
EP = DP × TP ranks (MoE TP 1); without it each expert's width is split over DP × TP (EP 1). With
data parallelism every rank's MoE layer processes the tokens of all DP ranks: vLLM's default
all2all backend `allgather_reducescatter` (`ParallelConfig.all2all_backend`,
vllm/config/parallel.py; `AgRsAll2AllManager`, vllm/distributed/device_communicators/all2all.py)
all-gathers the hidden states over the DP group (`get_dp_group()`) before the experts and
reduce-scatters their output after; with TP > 1 the TP ranks' partial outputs are then summed by
the TP all-reduce the dense model already prices. The gather and scatter together move the bytes
of one ring all-reduce of the gathered tokens (an all-reduce is a reduce-scatter then an
all-gather: Patarasuk & Yuan, JPDC 2009), so they are priced as one all-reduce of
T_dp × hidden × 2 bytes over the DP ranks, from the device's measured all-reduce table (graph mode
when the step runs in a CUDA graph) or the link model.

The tokens T_dp entering each rank's MoE layer (vllm/v1/worker/dp_utils.py
`_synchronize_dp_ranks`): when every rank runs the step in a CUDA graph (its tokens ≤ the largest
capture size), vLLM pads every rank to the largest rank's count, T_dp = DP × max_i T_i; otherwise
(any rank eager) there is no padding, T_dp = Σ_i T_i.

Expert skew (`expert_routing_skew`, a power-law exponent; 0 = uniform routing, the default): the
measured tables hold AIConfigurator's `balanced`, `power_law_1.01` and `power_law_1.2` routings,
so with a table the skew must be one of 0, 1.01, 1.2 (AIConfigurator's exponent is that of the
distribution its per-expert token counts are drawn from, collector/helper.py
`_generate_power_law_distribution`, with the busiest EP rank measured); the roofline takes expert
i's popularity ∝ (i + 1)^−skew with the hottest experts on rank 0 (vLLM's default linear
placement), each token picking k distinct experts (`profiler.moe_routing`: the busiest rank's
expected pairs and distinct active experts), and prices that rank, which every other rank waits
for at the combine.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from profiler.device_spec import DeviceSpec
from profiler.model_spec import ModelSpec
from profiler.moe import MoESpec
from profiler.moe_routing import busiest_rank_inclusion, rank_load
from profiler.roofline import gemm_time_s, ring_all_reduce_time_s

MEASURED_SKEWS = {0.0: "balanced", 1.01: "power_law_1.01", 1.2: "power_law_1.2"}
_FP32_BYTES = 4

Curve = Callable[[float], tuple[float, bool]]


class MoELayout:
    """How an MoE model's layers are split over DP × TP GPUs (module docstring).

    Attributes:
        moe_tp: ranks each expert's width is split over; moe_ep: ranks the experts are split over;
        experts_per_rank: routed experts the busiest rank holds (⌈E / EP⌉: vLLM gives the
            remainder to the first ranks, `MoESpec.experts_per_rank`).

    Args:
        key_prefix: what the messages put before each engine key ("engine." in a config's
            `engine:`, "cluster.<pool>.engine." in a pool's, "" for a bare layout).

    Raises:
        ValueError: an EP degree above the experts, or the MoE TP degree does not divide the
            expert width (messages name the engine key and what would be valid).
    """

    def __init__(self, moe: MoESpec, tensor_parallel_size: int = 1, data_parallel_size: int = 1,
                 enable_expert_parallel: bool = False, key_prefix: str = "engine."):
        gpus = tensor_parallel_size * data_parallel_size
        self.data_parallel_size = data_parallel_size
        self.moe_ep = gpus if enable_expert_parallel else 1
        self.moe_tp = 1 if enable_expert_parallel else gpus
        self.experts_per_rank = moe.experts_per_rank(
            self.moe_ep, key=f"{key_prefix}enable_expert_parallel: expert parallel size (data_parallel_size × "
                             f"tensor_parallel_size = {data_parallel_size} × {tensor_parallel_size})")
        if moe.expert_intermediate_size % self.moe_tp or moe.shared_expert_intermediate_size % self.moe_tp:
            raise ValueError(f"{key_prefix}tensor_parallel_size × data_parallel_size = {gpus} (the MoE tensor-parallel "
                             f"degree without enable_expert_parallel) must divide the expert width "
                             f"{moe.expert_intermediate_size}; set {key_prefix}enable_expert_parallel: true or another "
                             "degree")


def dp_moe_tokens(tokens_per_rank: list[int], cuda_graph_max_tokens: int) -> int:
    """Tokens entering each rank's MoE layer in a data-parallel step (module docstring): DP × the
    largest rank's tokens when every rank is within the CUDA-graph sizes, else their sum."""
    if max(tokens_per_rank) <= cuda_graph_max_tokens:
        return len(tokens_per_rank) * max(tokens_per_rank)
    return sum(tokens_per_rank)


class MoEBlockCost:
    """Seconds of one layer's sparse block on the busiest rank, by the tokens entering it.

    Args:
        model: an MoE model (`model.moe` set).
        device: its figures (roofline parts).
        layout: the `MoELayout`.
        expert_routing_skew: 0 (uniform) or a power-law exponent (module docstring).
        moe_table: the device's measured `moe` table (`profiler.measured.tables`), or None.
        gemm_s: t(m, n, k) of one bf16 GEMM on the device (the dense cost model's), for the router
            and the shared expert.
        dtype_bytes: weight bytes per element.
        flops_efficiency, bandwidth_efficiency, kernel_latency_s: the roofline's terms.
        source_label: names the table's source in `describe()`.
        block_table: the model's measured `moe_block` table (LLMServingSim: the whole sparse
            block, router and top-k included, every expert on one GPU, by tokens and active
            experts), with `block_label`; used first at EP 1 and MoE TP 1, else after `moe_table`,
            at the busiest rank's tokens-equivalent (its token–expert pairs / top-k) and expected
            active experts.

    Raises:
        ValueError: a skew the table has no routing for (naming `engine.expert_routing_skew` and
            the valid values), or no table rows at the model's shape when one is given elsewhere.
    """

    def __init__(self, model: ModelSpec, device: DeviceSpec, layout: MoELayout, expert_routing_skew: float = 0.0,
                 moe_table=None, gemm_s: Callable[[float, float, float], float] | None = None,
                 dtype_bytes: int = 2, flops_efficiency: float = 0.7, bandwidth_efficiency: float = 0.8,
                 kernel_latency_s: float = 3e-6, source_label: str = "measured", block_table=None,
                 block_label: str = "measured"):
        assert model.moe is not None
        self.model, self.moe, self.device, self.layout = model, model.moe, device, layout
        self.skew = float(expert_routing_skew)
        self.dtype_bytes = dtype_bytes
        self.flops_efficiency, self.bandwidth_efficiency = flops_efficiency, bandwidth_efficiency
        self.kernel_latency_s = kernel_latency_s
        self.gemm_s = gemm_s or (lambda m, n, k: gemm_time_s(m, n, k, device, dtype_bytes, flops_efficiency,
                                                             bandwidth_efficiency, kernel_latency_s))
        self._inclusion = busiest_rank_inclusion(self.moe.num_experts, self.moe.num_experts_per_tok, layout.moe_ep,
                                                 self.skew)
        self.out_of_grid = 0
        self.whole_block = False  # the experts' time includes the router and top-k
        self._experts, self.experts_source = self._experts_curve(moe_table, source_label, block_table, block_label)
        self._cache: dict[int, float] = {}

    def _experts_curve(self, table, label: str, block_table, block_label: str) -> tuple[Curve, str]:
        moe, lay = self.moe, self.layout
        usable_block = block_table is not None and lay.moe_tp == 1
        if usable_block and lay.moe_ep == 1:
            return self._block_curve(block_table, block_label)
        if table is not None and not (usable_block and not _measured_skew(self.skew)):
            distribution = _distribution(self.skew)
            rows = table[(table["hidden_size"] == self.model.hidden_size)
                         & (table["inter_size"] == moe.expert_intermediate_size) & (table["topk"] == moe.num_experts_per_tok)
                         & (table["num_experts"] == moe.num_experts) & (table["moe_tp_size"] == lay.moe_tp)
                         & (table["moe_ep_size"] == lay.moe_ep) & (table["distribution"] == distribution)]
            if len(rows) >= 2:
                rows = rows.sort_values("num_tokens")
                x = np.log(rows["num_tokens"].to_numpy(dtype=np.float64))
                y = np.log(rows["time_s"].to_numpy(dtype=np.float64))
                lo, hi = float(rows["num_tokens"].iloc[0]), float(rows["num_tokens"].iloc[-1])

                def curve(tokens: float) -> tuple[float, bool]:
                    if lo <= tokens <= hi:
                        return float(np.exp(np.interp(math.log(tokens), x, y))), False
                    edge = lo if tokens < lo else hi
                    t_edge = float(np.exp(np.interp(math.log(edge), x, y)))
                    return t_edge * self._experts_roofline_s(tokens) / self._experts_roofline_s(edge), True
                kind = "moe" if self.dtype_bytes != 1 else "moe, FP8 experts"
                return curve, (f"{label}: {kind} (hidden {self.model.hidden_size}, width {moe.expert_intermediate_size}, "
                               f"top-{moe.num_experts_per_tok} of {moe.num_experts}, moe_tp {lay.moe_tp}, "
                               f"moe_ep {lay.moe_ep}, {distribution})")
        if usable_block:
            return self._block_curve(block_table, block_label)
        weights = " in MXFP4, W4A16" if self.dtype_bytes < 1 else ""
        return (lambda tokens: (self._experts_roofline_s(tokens), False)), f"roofline (active experts' weights{weights})"

    def _block_curve(self, rows, label: str) -> tuple[Curve, str]:
        """t(tokens) from a whole-block table over (tokens, active experts): the busiest rank's
        pairs / top-k tokens at its expected active experts (at least top-k, the table's floor)."""
        from profiler.measured.grid import LogGrid

        k = self.moe.num_experts_per_tok
        grid = LogGrid.from_frame(rows, ["num_tokens", "active_experts"], fill_axis=1, source=f"{label} moe_block",
                                  roofline=lambda t, a: self._active_roofline_s(t * k, a))
        self.whole_block = True

        def curve(tokens: float) -> tuple[float, bool]:
            pairs, active = self._rank_load(tokens)
            point = (max(pairs / k, 1.0), min(max(active, float(k)), pairs))
            t, out = grid(*point)
            if point[0] > grid.upper[0]:
                t *= self._active_roofline_s(pairs, point[1]) / self._active_roofline_s(*(
                    (c * k if i == 0 else c) for i, c in enumerate(grid.clamp(*point))))
            return t, out
        where = "every expert on one GPU" if self.layout.moe_ep == 1 else (
            f"mapped to moe_ep {self.layout.moe_ep}: the busiest rank's pairs / top-k and active experts")
        return curve, f"{label}: moe_block (tokens × active experts; {where})"

    def _rank_load(self, tokens: float) -> tuple[float, float]:
        """(expected token–expert pairs, expected distinct active experts) on the busiest rank for
        `tokens` tokens: distinct top-k routing at the skew (`profiler.moe_routing`)."""
        return rank_load(self._inclusion, tokens)

    def _experts_roofline_s(self, tokens: float) -> float:
        """The experts of one layer on the busiest rank, on the roofline."""
        return self._active_roofline_s(*self._rank_load(tokens))

    def _active_roofline_s(self, pairs, active):
        """The roofline of `pairs` token–expert pairs over `active` experts on one rank (scalars or arrays)."""
        moe, lay = self.moe, self.layout
        width = moe.expert_intermediate_size / lay.moe_tp
        values = 3 * self.model.hidden_size * width
        flops = 2.0 * pairs * values
        num_bytes = (active * values + pairs * (2 * self.model.hidden_size + 3 * width)) * self.dtype_bytes
        return (np.maximum(flops / (self.device.peak_bf16_flops * self.flops_efficiency),
                           num_bytes / (self.device.mem_bandwidth_bytes_per_s * self.bandwidth_efficiency))
                + 3 * self.kernel_latency_s)  # two grouped GEMMs and SiLU·mul

    def layer_s(self, tokens: int) -> float:
        """One layer's sparse block for `tokens` tokens entering it (router, top-k, experts,
        shared expert), seconds; cached per count."""
        cached = self._cache.get(tokens)
        if cached is not None:
            return cached
        moe, hidden = self.moe, self.model.hidden_size
        router_s = topk_s = 0.0
        if not self.whole_block:  # a whole-block table already holds the router and its top-k
            router_s = self.gemm_s(tokens, moe.num_experts, hidden)
            topk_s = 2.0 * tokens * moe.num_experts * _FP32_BYTES / (
                self.device.mem_bandwidth_bytes_per_s * self.bandwidth_efficiency) + self.kernel_latency_s
        experts_s, out = self._experts(float(tokens))
        self.out_of_grid += out
        shared_s = 0.0
        if moe.shared_expert_intermediate_size:
            width = moe.shared_expert_intermediate_size // self.layout.moe_tp
            shared_s = self.gemm_s(tokens, 2 * width, hidden) + self.gemm_s(tokens, hidden, width) + self.gemm_s(tokens, 1, hidden)
        cached = self._cache[tokens] = router_s + topk_s + experts_s + shared_s
        return cached


def _measured_skew(skew: float) -> bool:
    return any(math.isclose(skew, value) for value in MEASURED_SKEWS)


def _distribution(skew: float) -> str:
    for value, name in MEASURED_SKEWS.items():
        if math.isclose(skew, value):
            return name
    raise ValueError(f"engine.expert_routing_skew {skew:g}: the measured MoE tables hold the routings "
                     f"{', '.join(f'{v:g} ({n})' for v, n in MEASURED_SKEWS.items())}; choose one of them, "
                     "or cost_model: roofline for another exponent")


class MoECostModel:
    """A dense cost model of an MoE model's non-expert parts plus every layer's `MoEBlockCost`.

    Implements `CostModel.predict_step_s` for one engine (data_parallel_size 1: the MoE layers see
    the step's own tokens; with TP the base model's all-reduces already combine them). A
    data-parallel group prices a step with `dp_step_s` (simulator/data_parallel.py).

    Args:
        base: the dense cost model of the same `ModelSpec` at the TP degree.
        block: the `MoEBlockCost`.
        dispatch_s: t(bytes) of the all-gather + reduce-scatter pair of one MoE layer, by CUDA-graph
            mode: {"graph": curve, "eager": curve} (curves return (seconds, out of grid)); None at DP 1.
        cuda_graph_max_tokens: the largest CUDA-graph capture size (DP padding, graph vs eager).
        dispatch_source: where `dispatch_s` comes from, for `describe()`.
    """

    def __init__(self, base, block: MoEBlockCost, dispatch_s: dict[str, Curve] | None = None,
                 cuda_graph_max_tokens: int = 512, dispatch_source: str = ""):
        self.base, self.block, self.model = base, block, block.model
        self.dispatch_s = dispatch_s
        self.cuda_graph_max_tokens = cuda_graph_max_tokens
        self.dispatch_source = dispatch_source
        self.num_predictions = 0
        self.out_of_range = getattr(base, "out_of_range", None)

    def moe_step_s(self, tokens: int, dispatch_mode: str | None = None) -> float:
        """All layers' sparse blocks for `tokens` tokens entering each rank's MoE layers, plus, in a
        data-parallel step, the dispatch and combine in `dispatch_mode` ("graph" when every rank
        runs the step in a CUDA graph, else "eager"); seconds."""
        layer_s = self.block.layer_s(tokens)
        if dispatch_mode is not None and self.dispatch_s is not None:
            layer_s += self.dispatch_s[dispatch_mode](tokens * self.model.hidden_size * 2.0)[0]
        return self.model.num_moe_layers * layer_s  # dense leading layers: the base model's MLP

    def predict_step_s(self, query_tokens, context_tokens, is_prefill) -> float:
        """Duration (s) of one step of one engine (no data parallelism); 0.0 for an empty batch."""
        dense_s = self.base.predict_step_s(query_tokens, context_tokens, is_prefill)
        if not len(query_tokens):
            return dense_s
        self.num_predictions += 1
        return dense_s + self.moe_step_s(int(sum(query_tokens)))

    def dp_step_s(self, batches: list[tuple[list, list, list]]) -> float:
        """One synchronised step of a data-parallel group (module docstring): each rank's dense
        part on its own batch (a rank without work runs vLLM's one-token dummy batch), the slowest
        of them, plus the MoE layers over every rank's tokens. Seconds.

        Args:
            batches: per DP rank, its (query_tokens, context_tokens, is_prefill) lists; an empty
                rank's lists are empty.
        """
        dense, tokens = [], []
        for q, c, p in batches:
            if not len(q):
                q, c, p = [1], [0], [False]  # `execute_dummy_batch`: a one-token forward pass
            dense.append(self.base.predict_step_s(q, c, p))
            tokens.append(int(sum(q)))
        self.num_predictions += 1
        mode = "graph" if max(tokens) <= self.cuda_graph_max_tokens else "eager"
        return max(dense) + self.moe_step_s(dp_moe_tokens(tokens, self.cuda_graph_max_tokens), mode)

    def describe(self) -> dict:
        """The base model's `describe()` (or a roofline label) with the MoE parts added."""
        described = dict(self.base.describe()) if hasattr(self.base, "describe") else {
            "name": "roofline", "kind": "roofline", "label": "roofline", "parts": {}, "out_of_grid_steps": 0}
        lay = self.block.layout
        parts = {**described.get("parts", {}), "moe_experts": self.block.experts_source}
        if self.dispatch_s is not None:
            parts["moe_dispatch_combine"] = self.dispatch_source
        label = (f"{described['label']}; MoE experts from {self.block.experts_source.split(':')[0]} "
                 f"(moe_ep {lay.moe_ep}, moe_tp {lay.moe_tp})")
        return {**described, "label": label, "parts": parts, "moe_steps_out_of_grid": self.block.out_of_grid,
                "out_of_grid_steps": described.get("out_of_grid_steps", 0)}


def dispatch_curves(sources, num_gpus: int, device: DeviceSpec) -> tuple[dict[str, Curve], str]:
    """t(bytes) of one MoE dispatch + combine over `num_gpus` GPUs by CUDA-graph mode: the
    device's measured all-reduce at that GPU count (module docstring), else the ring model."""
    from profiler.measured.table_grids import _one_d  # measured-table curve helper

    ring = lambda b: ring_all_reduce_time_s(b, device, num_gpus)  # noqa: E731
    for s in sources:
        table = s.tables.get("all_reduce")
        if table is None or not (table["num_gpus"] == num_gpus).any():
            continue
        rows = table[table["num_gpus"] == num_gpus]
        curves = {mode: _one_d(rows[rows["mode"] == mode], "size_bytes", f"{s.label} all_reduce", ring)
                  for mode in ("graph", "eager") if (rows["mode"] == mode).any()}
        curves.setdefault("graph", curves.get("eager"))
        curves.setdefault("eager", curves["graph"])
        return curves, f"{s.label}: all_reduce at {num_gpus} GPUs (all-gather + reduce-scatter)"
    return ({"graph": lambda b: (ring(b), False), "eager": lambda b: (ring(b), False)},
            f"roofline (ring all-gather + reduce-scatter over {num_gpus} GPUs)")


def build_moe_cost_model(cost_model: str, model: ModelSpec, device: DeviceSpec, tensor_parallel_size: int = 1,
                         data_parallel_size: int = 1, enable_expert_parallel: bool = False,
                         expert_routing_skew: float = 0.0, dtype_bytes: int = 2, kv_dtype_bytes: int = 2,
                         cuda_graph_max_tokens: int = 512) -> MoECostModel:
    """The cost model of an MoE point (`experiments.point.build_cost_model`): the dense parts as
    `cost_model` (`auto` / `measured:DIR` / `roofline`) selects them, the experts from the
    device's measured `moe_block` / `moe` tables when the cost model is measured and one matches
    (`MoEBlockCost`), else the roofline.

    Raises:
        ValueError: a `profile:DIR` cost model (fitted profiles of MoE models are not supported:
            the project's profiler runs dense models only), or as `MoELayout` / `MoEBlockCost`.
    """
    from profiler.roofline import RooflineCostModel

    tp, dp = tensor_parallel_size, data_parallel_size
    layout = MoELayout(model.moe, tp, dp, enable_expert_parallel)
    graph_max = cuda_graph_max_tokens
    if cost_model.startswith("profile:"):
        raise ValueError(f"cost_model {cost_model}: a fitted profile cannot price the MoE model {model.name!r} "
                         "(the profiler runs dense models); use auto, measured:DIR or roofline")
    base, sources = None, []
    if cost_model == "auto" or cost_model.startswith("measured:"):
        from profiler.measured.shipped import build_measured

        base = build_measured(cost_model, model, device, tp, dtype_bytes, kv_dtype_bytes, cuda_graph_max_tokens=graph_max)
        sources = base.sources if base is not None else []
    if base is None:
        base = RooflineCostModel(model, device, tensor_parallel_size=tp, dtype_bytes=dtype_bytes,
                                 kv_dtype_bytes=kv_dtype_bytes)
        gemm_s = base._gemm_s
    else:
        gemm_s = _measured_gemm(base)
    flops_eff, bw_eff, latency = base.flops_efficiency, base.bandwidth_efficiency, base.kernel_latency_s
    # FP8 experts (model.quantization, profiler/quantization.py) from the tables' fp8 / fp8_block
    # fused-MoE rows; their roofline with 1-byte weights. A model-specific BF16 block table does not apply.
    # MXFP4 experts: no table; their roofline with BF16 compute and 0.53125-byte weights (labelled).
    kernel = "bf16" if model.quantization is None else model.quantization.kernel
    moe_table = {"bf16": "moe", "fp8": "moe_fp8", "fp8_block": "moe_fp8_block", "mxfp4": "moe_mxfp4"}[kernel]
    expert_bytes = (dtype_bytes if kernel == "bf16" else model.quantization.bytes_per_param if kernel == "mxfp4"
                    else 1)
    table_source = next((s for s in sources if moe_table in s.tables), None)
    from profiler.measured.cost_model import shape_key

    block_source = next((s for s in sources if kernel == "bf16" and "moe_block" in s.tables and s.model is not None
                         and shape_key(s.model) == shape_key(model) and s.model.moe == model.moe
                         and s.tensor_parallel_size == 1), None)
    block = MoEBlockCost(model, device, layout, expert_routing_skew,
                         table_source.tables[moe_table] if table_source is not None else None, gemm_s, expert_bytes,
                         flops_eff, bw_eff, latency, table_source.label if table_source is not None else "",
                         block_source.tables["moe_block"] if block_source is not None else None,
                         block_source.label if block_source is not None else "")
    dispatch, dispatch_source = (dispatch_curves(sources, dp, device) if dp > 1 else (None, ""))
    return MoECostModel(base, block, dispatch, graph_max, dispatch_source)


def _measured_gemm(base) -> Callable[[float, float, float], float]:
    """t(m, n, k) from a measured model's GEMM curves (cached per (n, k)): the router and shared
    expert priced from the device's GEMM table."""
    curves: dict[tuple[int, int], Curve] = {}

    def gemm_s(m: float, n: float, k: float) -> float:
        key = (int(n), int(k))
        if key not in curves:
            curves[key] = base._gemm_curve(f"moe_gemm_{key[0]}x{key[1]}", key[1], key[0])
        return curves[key](m)[0]
    return gemm_s
