"""`MeasuredCostModel`: a step's time from kernel times measured inside vLLM, priced per layer.

One TP rank of a dense Llama/Qwen/Mistral-family model runs, per step of T tokens over S
sequences (vLLM's `LlamaDecoderLayer` / `Qwen3DecoderLayer`,
`vllm/model_executor/models/{llama,qwen3}.py`):

- per layer: the four GEMMs `qkv_proj`, `o_proj`, `gate_up_proj`, `down_proj` at m = T and the
  model's (k, n) at the TP degree (`ModelSpec.layer_gemm_shapes`); attention over the step's
  (query, context) mix; two all-reduces of T × hidden bf16 values (after o_proj and down_proj,
  `RowParallelLinear`, tp > 1); and the element-wise kernels: two RMSNorms (vLLM fuses the
  residual add into them: `RMSNorm.forward` with `residual`, `layers/layernorm.py`), rotary
  embedding, SiLU · mul, and Qwen3's per-head q/k norms. A source that times residual adds
  separately (Vidur: Sarathi-Serve kernels) adds two of them.
- per step: the embedding gather and the final norm (T rows), the LM head (S rows × vocab / tp),
  the sampler (S rows) and a host overhead per step.

Where each part's time comes from, in order of preference (`describe()` says which per part):
1. a model-specific table of the same model (shapes equal) at the same TP degree (`layer_ops`,
   `sequence_ops`, `mixed_attention`: LLMServingSim, Vidur), interpolated in log space over the
   token / sequence count;
2. a per-shape table of the device (`gemm` over (m, n, k); `context_attention`,
   `decode_attention` at the model's heads per rank, or interpolated between the two measured
   query-head counts around it, `profiler.measured.head_interpolation`; `all_reduce` at
   num_gpus = tp: AIConfigurator), interpolated in log space (`LogGrid`); element-wise ops from any
   `layer_ops` table of the device at the same bytes (T × width scaled to the measured model's
   width);
3. the roofline (`profiler.roofline`), with efficiencies fitted to the device's GEMM table (the
   device's own without one).

Outside a table's grid (a step of more tokens than the largest measured m, contexts past the
longest measured, a larger all-reduce) the edge value is scaled by the roofline's ratio
(time(point) / time(edge)), and the step is counted in `out_of_grid_steps` (`out_of_range` by
family); so is a step that reads a cell the table lacks (never measured, or dropped on import as
faster than the datasheet), which `LogGrid` fills from the measured neighbour by the roofline's
ratio. Parts with no table at all are listed in `describe()["roofline_parts"]`.

Mapping a step onto the tables (approximations, stated):
- AIConfigurator's context attention is measured for fresh prefills only; a chunk of q tokens
  after c cached ones is priced as a fresh prefill with the same query-key pairs,
  sqrt(q² + 2 q c) tokens (equal attention FLOPs). Several prefill chunks: the sum of each.
- Decodes are priced as one batch of B decodes at their mean context (the kernels' time is linear
  in total KV there); a speculative verify of q tokens over c cached ones is one decode row over
  c + q − 1 keys: the kernel reads that sequence's KV once for all q queries (vLLM runs verifies
  through the same varlen attention as decodes), so its time is the KV read, not q of them. Its q
  tokens still count in full for the GEMMs and element-wise kernels.
- LLMServingSim's mixed table holds one prefill chunk with a batch of decodes: the largest chunk
  is priced with the decodes, any other chunk alone.
- CUDA graphs as vLLM 0.19 runs them (`profiler.cuda_graphs`, cited there): a step of T ≤ the largest
  capture size runs its GEMMs, element-wise kernels and graph-mode all-reduces at T padded up to the
  next capture size, above it at T, eager; attention, LM head and sampler at the step's real rows.
- An LM head wider than the GEMM table's largest n is priced as that many column blocks (time is
  near-linear in n there: on H100, t(n = 65536) / t(n = 16384) = 3.4–4.2 for m = 1–1024).

Speed: per-token-count parts are cached per count (a dict look-up after the first time), so a
step costs a few look-ups and one or two small interpolations: microseconds (BENCHMARKS.md).
"""
from __future__ import annotations

import math
from collections import Counter
from itertools import compress
from typing import Callable

import numpy as np
import pandas as pd

from profiler.cuda_graphs import CUDA_GRAPH_MAX_CAPTURE_TOKENS as CUDA_GRAPH_MAX_TOKENS, capture_sizes_up_to, padded_tokens
from profiler.device_spec import DeviceSpec
from profiler.measured.grid import LogGrid
from profiler.measured.head_interpolation import rows_at_heads
from profiler.measured.table_grids import Curve, _all_reduce_curve, _gemm_grid, _gemm_m_curve, _measured_width, _mixed_grids, _one_d
from profiler.measured.tables import MeasuredTableError, MeasuredTables
from profiler.model_spec import ModelSpec
from profiler.quantization import kernel_for, weight_only_gemm_time_s
from profiler.roofline import BANDWIDTH_EFFICIENCY, FLOPS_EFFICIENCY, STEP_OVERHEAD_S, gemm_time_s, ring_all_reduce_time_s

GEMM_OPS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
KERNEL_LATENCY_S = 3e-6  # a device without kernel_latency_s: AIConfigurator system.yaml `mem_empirical_constant_latency`
LOGIT_BYTES = 4  # the sampler reads fp32 logits (vLLM `Sampler`)

_IN_GRID: frozenset = frozenset()  # a step with every part on its grids
_PREFILL_CACHE = 65536  # on-grid prefill chunk times kept by `_attention_layer_s` before it starts over


# The GEMM table each weight kernel (`profiler.quantization.kernel_for`) is priced from; None:
# the roofline (4-bit / 8-bit weight-only Marlin: no measured table).
GEMM_TABLES = {"bf16": "gemm", "fp8": "gemm_fp8", "fp8_block": "gemm_fp8_block", "weight_only": None}


def shape_key(model: ModelSpec) -> tuple:
    """The fields that decide a layer's kernel shapes and kernels (not the layer count or context
    length): a quantised model's weight format too (a model-specific table is of BF16 weights)."""
    return (model.hidden_size, model.num_attention_heads, model.num_key_value_heads, model.head_dim,
            model.intermediate_size, model.vocab_size, model.qk_norm, model.quantization)


def has_qk_norm(model: ModelSpec) -> bool:
    """Whether the model normalises q and k per head (Qwen3: `Qwen3Attention.q_norm/k_norm`)."""
    return bool(model.qk_norm)


class MeasuredCostModel:
    """Implements `CostModel.predict_step_s` from measured kernel tables (module docstring).

    Args:
        sources: measured tables of the device (model-specific ones first in preference).
        model: the model's shapes.
        device: the device's datasheet figures (roofline fallbacks, all-reduce without a table).
        tensor_parallel_size: GPUs the model is sharded over.
        dtype_bytes: the activation dtype's bytes, must be 2 (BF16: vLLM's activations also with
            quantised weights). The weights' format is `model.quantization`: FP8 W8A8 GEMMs from the
            `gemm_fp8` / `gemm_fp8_block` tables, weight-only (Marlin) from the roofline, labelled.
        kv_dtype_bytes: 2 (BF16 KV cache) or 1 (FP8: the `*_fp8_kv` attention tables).
        step_overhead_s: host time per step; default the device's `step_overhead_s` (an assumption
            unless the device file measured it: no imported table times the host).
        host_s_per_seq: host time per sequence of a step that the GPU waits for (s): a synchronous
            engine's per-request scheduling, input preparation and output processing
            (`experiments.deployment.host_s_per_seq`); 0 when it overlaps the GPU.
        cuda_graph_max_tokens: vLLM's largest capture size before its list is built (steps up to
            the list's last size padded, graph mode); 0: no graphs (`enforce_eager`). `profiler.cuda_graphs`.
        name: the `cost_model` value that selected this model (for `describe()`).

    Attributes:
        num_predictions: steps priced; out_of_grid_steps: steps with any part out of its grid;
        out_of_range: Counter of those steps by part ("gemm", "attention", "all_reduce", ...).

    Raises:
        MeasuredTableError: no sources, a source measured on another device, an activation dtype
            other than BF16, a KV dtype other than 1 or 2 bytes, or a model the TP degree cannot
            split (`ModelSpec` errors); ValueError: a weight format the device cannot run
            (`profiler.quantization.kernel_for`).
    """

    def __init__(self, sources: list[MeasuredTables], model: ModelSpec, device: DeviceSpec,
                 tensor_parallel_size: int = 1, dtype_bytes: int = 2, kv_dtype_bytes: int = 2,
                 step_overhead_s: float | None = None, cuda_graph_max_tokens: int = CUDA_GRAPH_MAX_TOKENS,
                 name: str = "measured", host_s_per_seq: float = 0.0) -> None:
        if not sources:
            raise MeasuredTableError("a measured cost model needs at least one measured-table source")
        for s in sources:
            if s.meta["device"].get("key") != device.card:  # a device with base: keeps its built-in's tables
                raise MeasuredTableError(f"{s.label}: measured on device {s.meta['device'].get('key')!r}, "
                                         f"cannot price device {device.name!r}")
        if dtype_bytes != 2 or kv_dtype_bytes not in (1, 2):
            raise MeasuredTableError(f"activations are priced in bf16 (dtype_bytes 2) with a bf16 or fp8 KV cache "
                                     f"(kv_dtype_bytes 2 or 1); got {dtype_bytes} / {kv_dtype_bytes}: FP8 weights are "
                                     "the model's quantization (engine.quantization), not its dtype")
        self.sources, self.model, self.device = list(sources), model, device
        self.kv_dtype_bytes = kv_dtype_bytes
        self.weight_kernel = "bf16" if model.quantization is None else kernel_for(model.quantization, device)
        self.tp = tp = tensor_parallel_size
        self.layer_gemms = model.layer_gemm_shapes(tp)
        self.heads = model.num_attention_heads // tp
        self.kv_heads = model.kv_heads_per_rank(tp)
        self.step_overhead_s = (getattr(device, "step_overhead_s", STEP_OVERHEAD_S) if step_overhead_s is None
                                else step_overhead_s)
        self.host_s_per_seq = host_s_per_seq
        self.kernel_latency_s = getattr(device, "kernel_latency_s", KERNEL_LATENCY_S)
        self.cuda_graph_sizes = capture_sizes_up_to(cuda_graph_max_tokens)
        self.cuda_graph_max_tokens = self.cuda_graph_sizes[-1] if self.cuda_graph_sizes else 0
        self.name = name
        self.num_predictions = self.out_of_grid_steps = 0
        self.out_of_range: Counter = Counter()
        # One layer's attention time of an on-grid prefill chunk, by its query-key length `isl`
        # (`_attention_layer_s`); off-grid ones are not kept (they count their parts each time).
        self._prefill_in_grid: dict[float, float] = {}
        self.parts: dict[str, str] = {}  # part → where its times come from
        self.roofline_parts: list[str] = []
        self.flops_efficiency, self.bandwidth_efficiency = self._fit_efficiencies()
        self._gemm = {name: self._layer_gemm_curve(name, k, n) for name, k, n in self.layer_gemms}
        self._all_reduce = self._all_reduce_curves()
        self._elementwise = self._elementwise_curves()
        self._lm_head, self._sampler = self._sequence_curves()
        self._build_attention()
        self._token_cache: dict[int, tuple[float, frozenset]] = {}
        self._seq_cache: dict[int, tuple[float, frozenset]] = {}

    # -- where each part comes from ---------------------------------------------------------

    def _model_source(self, table: str) -> MeasuredTables | None:
        """The first source with `table` measured for this model's shapes at this TP degree."""
        for s in self.sources:
            if (table in s.tables and s.model is not None and shape_key(s.model) == shape_key(self.model)
                    and s.tensor_parallel_size == self.tp):
                return s
        return None

    def _device_source(self, table: str) -> MeasuredTables | None:
        return next((s for s in self.sources if table in s.tables), None)

    def _fit_efficiencies(self) -> tuple[float, float]:
        """Roofline efficiencies fitted to the device's GEMM table (the medians of achieved / peak
        FLOP/s over GEMMs of m ≥ 2048 and n, k ≥ 4096, and of achieved / datasheet bandwidth over
        m ≤ 8, n·k ≥ 4096²); the device's own (datasheet file or assumed defaults) without a table."""
        defaults = (getattr(self.device, "gemm_flops_efficiency", FLOPS_EFFICIENCY),
                    getattr(self.device, "memory_bandwidth_efficiency", BANDWIDTH_EFFICIENCY))
        source = self._device_source("gemm")
        if source is None:
            return defaults
        g = source.tables["gemm"]
        m, n, k, t = (g[c].to_numpy(dtype=np.float64) for c in ("m", "n", "k", "time_s"))
        big = (m >= 2048) & (n >= 4096) & (k >= 4096)
        small = (m <= 8) & (n * k >= 4096.0 ** 2)
        flops = float(np.median(2 * m[big] * n[big] * k[big] / t[big])) / self.device.peak_bf16_flops if big.any() else defaults[0]
        bw = (float(np.median(2 * (m[small] * k[small] + k[small] * n[small] + m[small] * n[small]) / t[small]))
              / self.device.mem_bandwidth_bytes_per_s) if small.any() else defaults[1]
        return min(max(flops, 0.05), 1.0), min(max(bw, 0.05), 1.0)

    def _roofline_gemm_s(self, m: float, n: float, k: float, kernel: str = "bf16") -> float:
        """The roofline of one GEMM on `kernel`'s path: BF16; FP8 W8A8 at the FP8 peak with the
        activations' quantisation pass (`gemm_time_s` of 1-byte operands); weight-only at the BF16
        peak with the packed weight bytes (`weight_only_gemm_time_s`). The bf16-fitted efficiencies."""
        terms = (self.flops_efficiency, self.bandwidth_efficiency, self.kernel_latency_s)
        if kernel == "weight_only":
            return weight_only_gemm_time_s(max(m, 1.0), n, k, self.device, self.model.quantization.bytes_per_param, *terms)
        return gemm_time_s(max(m, 1.0), n, k, self.device, 2 if kernel == "bf16" else 1, *terms)

    def _gemm_roofline_v(self, m, n, k, kernel: str = "bf16"):
        """`_roofline_gemm_s` over arrays (fills a GEMM grid's unmeasured cells)."""
        fp8 = kernel in ("fp8", "fp8_block")
        peak = self.device.peak_flops(1 if fp8 else 2)
        bytes_per_s = self.device.mem_bandwidth_bytes_per_s * self.bandwidth_efficiency
        num_bytes = (m * k + k * n) * (1.0 if fp8 else 2.0) + 2.0 * m * n + (3.0 * m * k if fp8 else 0.0)
        return np.maximum(2.0 * m * n * k / (peak * self.flops_efficiency), num_bytes / bytes_per_s) + self.kernel_latency_s

    def _elementwise_roofline_s(self, num_bytes: float) -> float:
        return num_bytes / (self.device.mem_bandwidth_bytes_per_s * self.bandwidth_efficiency) + self.kernel_latency_s

    def _gemm_curve(self, op: str, k: int, n: int, part: str | None = None, kernel: str = "bf16") -> Curve:
        """t(m) of one GEMM of this model on `kernel`'s path (bf16 | fp8 | fp8_block | weight_only;
        `GEMM_TABLES`), module docstring's preference order."""
        part = part or op
        source = self._model_source("layer_ops")
        rows = source.tables["layer_ops"] if source is not None else None
        if rows is not None and (rows["op"] == op).any():
            self.parts[part] = f"{source.label}: layer_ops.{op}"
            return _one_d(rows[rows["op"] == op], "num_tokens", f"{source.label} {op}",
                          lambda m: self._roofline_gemm_s(m, n, k))
        table = GEMM_TABLES[kernel]
        source = self._device_source(table) if table is not None else None
        if source is None:
            fmt = self.model.quantization
            self.parts[part] = "roofline" + (f" ({fmt.label}, device efficiencies)" if kernel != "bf16" else "")
            self.roofline_parts.append(part)
            return lambda m: (self._roofline_gemm_s(m, n, k, kernel), False)
        grid = _gemm_grid(source, lambda m_, n_, k_: self._gemm_roofline_v(m_, n_, k_, kernel), table)
        blocks = max(1, math.ceil(n / grid.upper[1]))  # an LM head wider than the table
        n_block = n / blocks
        off_grid = not (grid.lower[1] <= n_block <= grid.upper[1] and grid.lower[2] <= k <= grid.upper[2])
        self.parts[part] = f"{source.label}: {table} (m, {n_block:g}, {k})" + (f" × {blocks} column blocks" if blocks > 1 else "")
        m_axis = grid.axes[0]
        # t(m_i, n, k) at every measured m: one log-space interpolation over (n, k) per m, once.
        column = pd.DataFrame({"m": m_axis, "time_s": [grid(m, n_block, k)[0] for m in m_axis]})
        anchor = grid.clamp(1.0, n_block, k)
        ratio = (self._roofline_gemm_s(1, n_block, k, kernel) / self._roofline_gemm_s(1, anchor[1], anchor[2], kernel)
                 if off_grid else 1.0)
        inner = _gemm_m_curve(column, table, f"{source.label} {table}", lambda m: self._roofline_gemm_s(m, n_block, k, kernel))

        def curve(m: float) -> tuple[float, bool]:
            t, out = inner(m)
            return blocks * t * ratio, out or off_grid
        return curve

    def _layer_gemm_curve(self, op: str, k: int, n: int) -> Curve:
        """t(m) of one decoder-layer GEMM on the model's weight kernel.

        Block FP8 (`fp8_block`): AIConfigurator times those GEMMs without a CUDA graph (its
        collector's `use_cuda_graph=gemm_type != "fp8_block"`), so small-m rows carry ~20 µs of
        launch overhead (h100_sxm n 1024, k 8192, m 1: 32.3 µs block vs 9.6 µs per-tensor FP8,
        graph-captured). vLLM replays steps of up to `cuda_graph_max_tokens` tokens as CUDA graphs
        and runs larger ones eagerly, so a block-FP8 GEMM is priced from the graph-captured
        per-tensor `gemm_fp8` rows up to that count (the same FP8 weight bytes and FP8 MMA; the
        block scales add 1/16384 of the weight) and from the eager `gemm_fp8_block` rows above it."""
        if self.weight_kernel != "fp8_block" or self._device_source("gemm_fp8") is None:
            return self._gemm_curve(op, k, n, kernel=self.weight_kernel)
        graph = self._gemm_curve(op, k, n, part=f"{op} (graph)", kernel="fp8")
        eager = self._gemm_curve(op, k, n, kernel="fp8_block")
        self.parts[op] = (f"{self.parts.pop(f'{op} (graph)')} up to {self.cuda_graph_max_tokens} tokens "
                          f"(graph-captured), {self.parts[op]} above (eager)")
        limit = self.cuda_graph_max_tokens
        return lambda m: graph(m) if m <= limit else eager(m)

    def _all_reduce_curves(self) -> dict[str, Curve] | None:
        """t(bytes) of one all-reduce per mode ("graph", "eager"), or None at tp 1."""
        if self.tp == 1:
            return None
        ring = lambda b: ring_all_reduce_time_s(b, self.device, self.tp)  # noqa: E731
        for s in self.sources:
            table = s.tables.get("all_reduce")
            if table is None or not (table["num_gpus"] == self.tp).any():
                continue
            rows = table[table["num_gpus"] == self.tp]
            curves = {mode: _all_reduce_curve(rows[rows["mode"] == mode], f"{s.label} all_reduce", ring)
                      for mode in ("graph", "eager") if (rows["mode"] == mode).any()}
            curves.setdefault("graph", curves.get("eager"))
            curves.setdefault("eager", curves["graph"])
            self.parts["all_reduce"] = f"{s.label}: all_reduce at {self.tp} GPUs"
            return curves
        self.parts["all_reduce"] = "roofline (ring model)"
        self.roofline_parts.append("all_reduce")
        return {"graph": lambda b: (ring(b), False), "eager": lambda b: (ring(b), False)}

    def _elementwise_widths(self) -> dict[str, tuple[float, float]]:
        """op → (width in elements per token, bytes moved per width element) for this model at tp."""
        m, tp = self.model, self.tp
        qk = (self.heads + self.kv_heads) * m.head_dim
        return {"layernorm": (m.hidden_size, 8.0), "rotary_emb": (qk, 4.0), "act_fn": (m.intermediate_size / tp, 6.0),
                "qk_norm": (qk, 4.0), "residual_add": (m.hidden_size, 6.0), "embedding": (m.hidden_size, 4.0),
                "final_layernorm": (m.hidden_size, 8.0)}

    def _elementwise_curves(self) -> dict[str, tuple[int, int, Curve]]:
        """op → (calls per layer, calls per step, t(T)); width-scaled from a device layer_ops
        table when one has the op, else the element-wise roofline."""
        widths = self._elementwise_widths()
        residual_source = next((s for s in self.sources if "layer_ops" in s.tables
                                and (s.tables["layer_ops"]["op"] == "residual_add").any()), None)
        calls = {"layernorm": (2, 0), "rotary_emb": (1, 0), "act_fn": (1, 0), "embedding": (0, 1),
                 "final_layernorm": (0, 1)}
        if has_qk_norm(self.model):
            calls["qk_norm"] = (1, 0)
        if self.model.moe is not None:  # SiLU·mul runs inside the fused MoE experts (profiler/moe_cost.py)
            del calls["act_fn"]
        if residual_source is not None:
            calls["residual_add"] = (2, 0)
        curves = {}
        for op, (per_layer, per_step) in calls.items():
            width, bytes_per = widths[op]
            roofline = lambda t, w=width, b=bytes_per: self._elementwise_roofline_s(t * w * b)  # noqa: E731
            source = next((s for s in self.sources if "layer_ops" in s.tables and s.model is not None
                           and (s.tables["layer_ops"]["op"] == op).any()), None)
            if source is None:
                self.parts[op] = "roofline (element-wise)"
                self.roofline_parts.append(op)
                curves[op] = (per_layer, per_step, lambda t, r=roofline: (r(t), False))
                continue
            measured_width = _measured_width(op, source)
            rows = source.tables["layer_ops"]
            scale = width / measured_width
            self.parts[op] = f"{source.label}: layer_ops.{op}" + (f" × width {scale:.3g}" if scale != 1 else "")
            inner = _one_d(rows[rows["op"] == op], "num_tokens", f"{source.label} {op}",
                           lambda t, r=roofline, s=scale: r(t / s))
            curves[op] = (per_layer, per_step, lambda t, f=inner, s=scale: f(t * s))
        return curves

    def _sequence_curves(self) -> tuple[Curve, Curve]:
        """(t_lm_head(S), t_sampler(S))."""
        m, tp = self.model, self.tp
        source = self._model_source("sequence_ops")
        rows = source.tables["sequence_ops"] if source is not None else None
        vocab_rank = -(-m.vocab_size // tp)
        if rows is not None and (rows["op"] == "lm_head").any():
            self.parts["lm_head"] = f"{source.label}: sequence_ops.lm_head"
            lm_head = _one_d(rows[rows["op"] == "lm_head"], "num_seqs", f"{source.label} lm_head",
                             lambda s: self._roofline_gemm_s(s, vocab_rank, m.hidden_size))
        else:
            lm_head = self._gemm_curve("lm_head", m.hidden_size, vocab_rank, part="lm_head")
        sampler_roofline = lambda s: self._elementwise_roofline_s(3.0 * s * m.vocab_size * LOGIT_BYTES)  # noqa: E731
        if rows is not None and (rows["op"] == "sampler").any():
            self.parts["sampler"] = f"{source.label}: sequence_ops.sampler"
            sampler = _one_d(rows[rows["op"] == "sampler"], "num_seqs", f"{source.label} sampler", sampler_roofline)
        else:
            self.parts["sampler"] = "roofline (element-wise, 3 passes over fp32 logits)"
            self.roofline_parts.append("sampler")
            sampler = lambda s: (sampler_roofline(s), False)  # noqa: E731
        return lm_head, sampler

    def _build_attention(self) -> None:
        """Per-layer attention pricing: mixed (model-specific), per-head tables, or the roofline."""
        m = self.model
        per_rank = self.heads * m.head_dim
        self._attn_flops_per_pair = 4.0 * per_rank
        self._attn_kv_bytes_per_token = 2.0 * self.kv_heads * m.head_dim * self.kv_dtype_bytes
        self._attn_qo_bytes_per_token = 2.0 * per_rank * 2
        self._mixed = self._prefill_grid = self._decode_grid = None
        # A model-specific mixed table is of a BF16 KV cache; an FP8 one reads the `*_fp8_kv` tables.
        source = self._model_source("mixed_attention") if self.kv_dtype_bytes == 2 else None
        if source is not None:
            rows = source.tables["mixed_attention"]
            self.parts["attention"] = f"{source.label}: mixed_attention"
            self._mixed = _mixed_grids(rows, source.label, self._chunk_roofline_s, self._decode_roofline_s)
            return
        heads = (self.heads, self.kv_heads, m.head_dim)
        fill = {"context_attention": lambda b, isl: b * self._chunk_roofline_s(isl, 0.0),
                "decode_attention": lambda b, kv: self._decode_roofline_s(b, kv - 1.0)}
        suffix = "_fp8_kv" if self.kv_dtype_bytes == 1 else ""
        for family, attr, key in (("context_attention", "_prefill_grid", "query_tokens"),
                                  ("decode_attention", "_decode_grid", "kv_tokens")):
            table = family + suffix
            source = self._device_source(table)
            rows = source.tables[table] if source is not None else None
            note = None
            if rows is not None:
                rows, note = rows_at_heads(rows, *heads, point_keys=("batch_size", key))
            if rows is None or rows.empty:
                self.parts[table] = f"roofline (no {table} table at heads {heads[0]}, kv heads {heads[1]}, head_dim {heads[2]})"
                self.roofline_parts.append(table)
                continue
            self.parts[table] = (f"{source.label}: {table} at heads {heads[0]}/{heads[1]}, head_dim {heads[2]}"
                                 + (f" ({note})" if note else ""))
            setattr(self, attr, LogGrid.from_frame(rows, ["batch_size", key], source=f"{source.label} {table}",
                                                   roofline=fill[family]))

    def _attention_roofline_s(self, pairs: float, kv_tokens: float, query_tokens: float) -> float:
        flops = self._attn_flops_per_pair * pairs
        num_bytes = self._attn_kv_bytes_per_token * kv_tokens + self._attn_qo_bytes_per_token * query_tokens
        return np.maximum(flops / (self.device.peak_bf16_flops * self.flops_efficiency),
                          num_bytes / (self.device.mem_bandwidth_bytes_per_s * self.bandwidth_efficiency)) + self.kernel_latency_s

    # -- per step ----------------------------------------------------------------------------

    def _token_part(self, num_tokens: int) -> tuple[float, frozenset]:
        """All layers' GEMMs, element-wise ops and all-reduces of a step of `num_tokens` scheduled
        tokens, run at the CUDA-graph padded count (`_graph_tokens`), plus the once-a-step token
        ops; and the parts that were out of grid. Cached per scheduled count."""
        cached = self._token_cache.get(num_tokens)
        if cached is not None:
            return cached
        scheduled = num_tokens
        num_tokens, mode = self._graph_tokens(scheduled)
        out = set()
        layer = 0.0
        for op, curve in self._gemm.items():
            t, o = curve(num_tokens)
            layer += t
            if o:
                out.add("gemm")
        step = 0.0
        for op, (per_layer, per_step, curve) in self._elementwise.items():
            t, o = curve(num_tokens)
            layer += per_layer * t
            step += per_step * t
            if o:
                out.add("elementwise")
        if self._all_reduce is not None:
            t, o = self._all_reduce[mode](num_tokens * self.model.hidden_size * 2.0)
            layer += 2 * t
            if o:
                out.add("all_reduce")
        cached = self._token_cache[scheduled] = (self.model.num_layers * layer + step, frozenset(out))
        return cached

    def _graph_tokens(self, num_tokens: int) -> tuple[int, str]:
        """(the token count a step of `num_tokens` scheduled tokens runs at, "graph" | "eager"):
        padded to the next capture size in a CUDA graph up to the largest, else itself, eager."""
        if num_tokens <= self.cuda_graph_max_tokens:
            return padded_tokens(num_tokens, self.cuda_graph_sizes), "graph"
        return num_tokens, "eager"

    def _seq_part(self, num_seqs: int) -> tuple[float, frozenset]:
        """LM head, sampler and host overhead (per step and per sequence) of a step of `num_seqs`
        sequences. Cached per count."""
        cached = self._seq_cache.get(num_seqs)
        if cached is None:
            t_head, o_head = self._lm_head(num_seqs)
            t_sampler, o_sampler = self._sampler(num_seqs)
            out = frozenset(name for name, o in (("lm_head", o_head), ("sampler", o_sampler)) if o)
            cached = self._seq_cache[num_seqs] = (
                t_head + t_sampler + self.step_overhead_s + self.host_s_per_seq * num_seqs, out)
        return cached

    def _lookup(self, grid: LogGrid, point: tuple[float, ...], roofline: Callable[..., float], out: set) -> float:
        """grid(point); past the grid's edges, the edge value × roofline(point) / roofline(edge),
        and "attention" added to `out` (also for a filled cell)."""
        t, o = grid(*point)
        return self._off_grid(grid, point, roofline, t, out) if o else t

    def _off_grid(self, grid: LogGrid, point: tuple[float, ...], roofline: Callable[..., float], t: float,
                  out: set) -> float:
        """`_lookup`'s answer for a point whose look-up `t` came back out of grid."""
        out.add("attention")
        if any(x > hi for x, hi in zip(point, grid.upper)):
            t *= roofline(*point) / roofline(*grid.clamp(*point))
        return t

    def _chunk_roofline_s(self, q: float, c: float) -> float:
        return self._attention_roofline_s(q * c + q * (q + 1) / 2, c + 2 * q, q)

    def _decode_roofline_s(self, rows: float, context: float) -> float:
        return self._attention_roofline_s(rows * (context + 1), rows * (context + 2), rows)

    def _fresh_prefill_roofline_s(self, batch: float, isl: float) -> float:
        """The roofline of the context_attention grid's key (1, isl): a fresh prefill of isl tokens."""
        return self._chunk_roofline_s(isl, 0.0)

    def _decode_kv_roofline_s(self, rows: float, kv: float) -> float:
        """The roofline of the decode_attention grid's key (rows, kv tokens incl. the new one)."""
        return self._decode_roofline_s(rows, kv - 1.0)

    def _attention_layer_s(self, prefills: list[tuple[float, float]], num_decode_rows: float,
                           decode_context: float, out: set) -> float:
        """One layer's attention over the prefill chunks [(q, c)] and the decode rows at a mean
        context of `decode_context` cached tokens."""
        if self._mixed is not None:
            return self._mixed_attention_s(prefills, num_decode_rows, decode_context, out)
        total = 0.0
        grid = self._prefill_grid
        for q, c in prefills:
            if grid is None:
                total += self._chunk_roofline_s(q, c)
                continue
            isl = math.sqrt(q * q + 2.0 * q * c)  # a fresh prefill with the chunk's query-key pairs
            t = self._prefill_in_grid.get(isl)  # most chunks repeat an earlier one's (q, c)
            if t is None:
                t, o = grid.at2(1.0, isl)  # the hot path: `_lookup` without its tuple and call
                if o:
                    t = self._off_grid(grid, (1.0, isl), self._fresh_prefill_roofline_s, t, out)
                else:
                    self._keep_prefill_in_grid(isl, t)
            total += t
        if num_decode_rows:
            grid = self._decode_grid
            if grid is None:
                total += self._decode_roofline_s(num_decode_rows, decode_context)
            else:
                kv = decode_context + 1.0
                t, o = grid.at2(num_decode_rows, kv)
                total += self._off_grid(grid, (num_decode_rows, kv), self._decode_kv_roofline_s, t, out) if o else t
        return total

    def _keep_prefill_in_grid(self, isl: float, t: float) -> None:
        """Keep an on-grid prefill chunk's time by its query-key length (a pure function of it;
        bounded: `_PREFILL_CACHE` values, then it starts over)."""
        if len(self._prefill_in_grid) >= _PREFILL_CACHE:
            self._prefill_in_grid.clear()
        self._prefill_in_grid[isl] = t

    def _mixed_attention_s(self, prefills, num_decode_rows, decode_context, out: set) -> float:
        """`_attention_layer_s` on a model-specific mixed table: the largest chunk with the
        decodes, any other chunk alone."""
        prefill_only, decode_only, mixed = self._mixed
        total = 0.0
        ordered = sorted(prefills, reverse=True)
        if num_decode_rows and ordered:
            (q, c), ordered = ordered[0], ordered[1:]
            both = lambda q, c, b, cd: self._chunk_roofline_s(q, c) + self._decode_roofline_s(b, cd)  # noqa: E731
            total += self._lookup(mixed, (q, c, num_decode_rows, decode_context), both, out)
        elif num_decode_rows:
            total += self._lookup(decode_only, (num_decode_rows, decode_context), self._decode_roofline_s, out)
        for q, c in ordered:
            total += self._lookup(prefill_only, (q, c), self._chunk_roofline_s, out)
        return total

    def predict_step_s(self, query_tokens, context_tokens, is_prefill) -> float:
        """Duration (s) of one step; 0.0 for an empty batch. Arrays as in `CostModel`.

        A one-token prefill chunk is priced as a decode (one query over its context; vLLM's
        attention batches it with the decodes). Counts the step in `num_predictions` and, when
        any part was off its grid, in `out_of_grid_steps` / `out_of_range`.

        Raises:
            ValueError: the three arrays differ in length.
        """
        total, out = self._price(query_tokens, context_tokens, is_prefill)
        if out:
            self._count(out)
        else:  # `_count` of an in-grid step, inline (once per simulated step)
            self.num_predictions += 1
        return total

    def predict_decode_steps_s(self, context_tokens, num_steps: int, first_step: int = 0) -> list[float]:
        """Durations (s) of consecutive plain-decode steps of the same sequences (the
        simulator's decode windows): entry j is exactly the float
        `predict_step_s(ones, context_tokens + first_step + j, zeros)` gives, and each step is
        counted as that call counts it, without building the step's lists.

        Args:
            context_tokens: ints, shape (num_seqs,): KV tokens of each sequence at step 0.
            num_steps: how many steps to price, from `first_step`.
        """
        return self.predict_decode_steps_total_s(len(context_tokens), int(sum(context_tokens)), num_steps, first_step)

    def predict_decode_steps_total_s(self, num_seqs: int, total_context_tokens: int, num_steps: int,
                                     first_step: int = 0) -> list[float]:
        """`predict_decode_steps_s` of `num_seqs` sequences holding `total_context_tokens` KV
        tokens in all at step 0 (only the total enters the price): the same floats and counts,
        without a list of the contexts."""
        durations, tally = self.price_decode_steps_total(num_seqs, total_context_tokens, num_steps, first_step)
        self.count_priced(tally, num_steps)
        return durations

    def price_decode_steps_total(self, num_seqs: int, total_context_tokens: int, num_steps: int,
                                 first_step: int = 0) -> tuple[list[float], list[frozenset] | None]:
        """(`predict_decode_steps_total_s`'s durations, their tally), nothing counted: a decode
        window prices steps it may not run (it stops at the next arrival) and counts only those
        it ran with `count_priced`, so `num_predictions` and the out-of-grid counts are the
        step-by-step path's."""
        if num_seqs == 0:
            priced = [self._price([], [], []) for _ in range(num_steps)]
            return [t for t, _ in priced], [out for _, out in priced]
        total_context = total_context_tokens
        rows = float(num_seqs)
        grid = self._decode_grid
        if self._mixed is None and grid is not None:
            return self._decode_grid_steps_s(grid, num_seqs, total_context, num_steps, first_step)
        durations, tally = [], []
        for j in range(first_step, first_step + num_steps):
            # `_price` of ones / contexts + j / zeros: no prefill; n decode rows of one token over
            # sum(c) + j n keys, the KV total formed as `_price` forms it.
            kv = float(total_context + j * num_seqs + num_seqs - rows)
            total, out = self._combine(num_seqs, num_seqs, [], rows, kv)
            tally.append(out)
            durations.append(total)
        return durations, tally

    def count_priced(self, tally: list[frozenset] | None, num_steps: int) -> None:
        """Count the first `num_steps` steps of a tally from `price_decode_steps_total` or
        `price_chunk_steps` as `predict_step_s` counts each (None: every step on its grids)."""
        if tally is None:
            self.num_predictions += num_steps
            return
        for out in tally[:num_steps]:
            self._count(out)

    def _decode_grid_steps_s(self, grid: LogGrid, num_seqs: int, total_context: int, num_steps: int,
                             first_step: int) -> tuple[list[float], list[frozenset] | None]:
        """`price_decode_steps_total` on the decode_attention grid: `_combine` of each step written
        out (its token and sequence parts are the same every step), the same floats and tally."""
        token_s, token_out = self._token_cache.get(num_seqs) or self._token_part(num_seqs)
        seq_s, seq_out = self._seq_cache.get(num_seqs) or self._seq_part(num_seqs)
        parts_s = token_s + seq_s  # `_combine` adds token + seq first, then the attention
        in_grid = token_out | seq_out | frozenset()  # the out-of-grid parts of a step whose attention is on the grid
        layers = self.model.num_layers
        rows = float(num_seqs)
        # The mean context of each step, as `_price` forms the KV total, then one look-up pass.
        # (sum(c) + (j + 1) n − rows) / rows + 1 for each step j: the ints by a range, the float
        # operations as written out per step (int − float, /, +), so the same floats.
        first_total = total_context + (first_step + 1) * num_seqs
        points_kv = [(i - rows) / rows + 1.0 for i in range(first_total, first_total + num_steps * num_seqs, num_seqs)]
        durations, outs = grid.at2_many(rows, points_kv, parts_s, layers)  # parts_s + layers * t each
        if not (in_grid or any(outs)):  # every step on the grid
            return durations, None
        tally = []
        for j, (point_kv, o) in enumerate(zip(points_kv, outs)):
            if o:
                out: set = set()
                t = grid.at2(rows, point_kv)[0]  # `at2_many`'s t: the same float
                t = self._off_grid(grid, (rows, point_kv), self._decode_kv_roofline_s, t, out)
                tally.append(token_out | seq_out | frozenset(out))
                durations[j] = parts_s + layers * t
            else:
                tally.append(in_grid)
        return durations, tally

    def _count(self, out: frozenset) -> None:
        """Count one priced step (and the parts of it that were off their grids)."""
        self.num_predictions += 1
        if out:
            self.out_of_grid_steps += 1
            for part in out:
                self.out_of_range[part] += 1

    def _price(self, query_tokens, context_tokens, is_prefill) -> tuple[float, frozenset]:
        """(seconds, parts out of grid) of one step, nothing counted."""
        q, c, p = query_tokens, context_tokens, is_prefill
        if not (type(q) is list and type(c) is list and type(p) is list):  # the scheduler's plans: lists
            q, c, p = (x if isinstance(x, list) else x.tolist() if isinstance(x, np.ndarray) else list(x)
                       for x in (query_tokens, context_tokens, is_prefill))
        if not len(q) == len(c) == len(p):
            raise ValueError(f"query_tokens, context_tokens, is_prefill must align; got lengths "
                             f"{len(q)}, {len(c)}, {len(p)}")
        if not q:
            return 0.0, frozenset()
        num_tokens = int(sum(q))
        prefill_index = [i for i in compress(range(len(p)), p) if q[i] > 1] if any(p) else []  # C-level filter
        return self._price_indexed(q, c, num_tokens, prefill_index)

    def predict_scheduled_step_s(self, query_tokens: list[int], context_tokens: list[int], is_prefill: list[bool],
                                 num_tokens: int, num_prefill_seqs: int, first_prefill: int) -> float:
        """`predict_step_s` of a scheduler's plan (the same float, counted the same way), from
        aligned lists and the counts the scheduler took while building them: `num_tokens` =
        sum(query_tokens), `num_prefill_seqs` = sum(is_prefill), and no prefill before index
        `first_prefill` (a plan's leading plain decodes), so the lists are not scanned again."""
        total, out = self.price_scheduled_step(query_tokens, context_tokens, is_prefill, num_tokens, num_prefill_seqs,
                                               first_prefill)
        if out:
            self._count(out)
        else:
            self.num_predictions += 1
        return total

    def price_scheduled_step(self, query_tokens: list[int], context_tokens: list[int], is_prefill: list[bool],
                             num_tokens: int, num_prefill_seqs: int, first_prefill: int) -> tuple[float, frozenset]:
        """(`predict_scheduled_step_s`'s seconds, the parts off their grids), nothing counted: a
        tally entry for `count_priced` (a replica's window prices a step it may not run)."""
        q, p = query_tokens, is_prefill
        if not q:
            return 0.0, _IN_GRID
        prefill_index = ([i for i in compress(range(first_prefill, len(p)), p[first_prefill:]) if q[i] > 1]
                         if num_prefill_seqs else [])
        return self._price_indexed(q, context_tokens, num_tokens, prefill_index)

    def price_chunk_steps(self, num_decodes: int, decode_context_tokens: int, chunk_context_tokens: int,
                          chunks: list[int]) -> tuple[list[float], list[frozenset]]:
        """Durations (s) of consecutive steps of `num_decodes` plain decodes and one prompt's
        chunks (a replica's prefill window), and their tally for `count_priced` (nothing counted
        yet): step j is `price_scheduled_step` of query tokens [1] * num_decodes + [chunks[j]],
        the decodes holding `decode_context_tokens` + j * num_decodes KV tokens in all and the
        prompt `chunk_context_tokens` + sum(chunks[:j]) — the same floats — from those totals,
        as only they enter `_price_indexed`; no step's lists are built. A one-token chunk is
        priced as a decode row, as there."""
        k = num_decodes
        decode_total, chunk_context = decode_context_tokens, chunk_context_tokens
        durations, tally = [], []
        for q in chunks:
            num_tokens = k + q
            if q > 1:  # `_price_indexed` with prefill_index = [k]
                prefills, prefill_q, prefill_c = [(float(q), float(chunk_context))], q, chunk_context
                decode_rows = float(k)
            else:
                prefills, prefill_q, prefill_c = [], 0, 0
                decode_rows = float(k + 1)
            decode_tokens = num_tokens - prefill_q
            decode_kv = float(decode_total + chunk_context - prefill_c + decode_tokens - decode_rows)
            total, out = self._combine(num_tokens, k + 1, prefills, decode_rows, decode_kv)
            tally.append(out)
            durations.append(total)
            decode_total += k
            chunk_context += q
        return durations, tally

    def _price_indexed(self, q: list[int], c: list[int], num_tokens: int,
                       prefill_index: list[int]) -> tuple[float, frozenset]:
        """`_price` of aligned lists whose token total is `num_tokens` and whose chunks priced
        as prefills (prefill entries of more than one query token) sit at `prefill_index`."""
        prefills = []
        prefill_q = prefill_c = 0
        for i in prefill_index:  # a step's one or two chunks
            prefills.append((float(q[i]), float(c[i])))
            prefill_q += q[i]
            prefill_c += c[i]
        decode_rows = float(len(q) - len(prefill_index))
        decode_tokens = num_tokens - prefill_q
        # Each decode or verify row reads its KV once: c keys, plus the q − 1 draft tokens of a verify.
        decode_kv = float(sum(c) - prefill_c + decode_tokens - decode_rows)
        return self._combine(num_tokens, len(q), prefills, decode_rows, decode_kv)

    def _combine(self, num_tokens: int, num_seqs: int, prefills: list[tuple[float, float]], decode_rows: float,
                 decode_kv: float) -> tuple[float, frozenset]:
        """(seconds, parts out of grid) of a step from its totals: `num_tokens` tokens over
        `num_seqs` sequences, the prefill chunks [(q, c)], `decode_rows` decode query rows
        attending `decode_kv` cached tokens in all."""
        token_s, token_out = self._token_cache.get(num_tokens) or self._token_part(num_tokens)
        seq_s, seq_out = self._seq_cache.get(num_seqs) or self._seq_part(num_seqs)
        out: set = set()
        attention_s = self.model.num_layers * self._attention_layer_s(
            prefills, decode_rows, decode_kv / decode_rows if decode_rows else 0.0, out)
        if not (out or token_out or seq_out):
            return token_s + seq_s + attention_s, _IN_GRID
        return token_s + seq_s + attention_s, token_out | seq_out | frozenset(out)

    def breakdown(self, query_tokens, context_tokens, is_prefill) -> dict[str, float]:
        """Seconds per part of one step: `gemm_s`, `elementwise_s`, `all_reduce_s` (all layers),
        `attention_s`, `lm_head_s`, `sampler_s`, `overhead_s`; all 0.0 for an empty batch. Not
        counted as a simulated step."""
        q = list(np.asarray(query_tokens).tolist())
        names = ("gemm_s", "elementwise_s", "all_reduce_s", "attention_s", "lm_head_s", "sampler_s", "overhead_s")
        if not q:
            return dict.fromkeys(names, 0.0)
        c, p = list(np.asarray(context_tokens).tolist()), list(np.asarray(is_prefill).tolist())
        tokens, mode = self._graph_tokens(int(sum(q)))
        layers = self.model.num_layers
        gemm = layers * sum(curve(tokens)[0] for curve in self._gemm.values())
        elementwise = sum((per_layer * layers + per_step) * curve(tokens)[0]
                          for per_layer, per_step, curve in self._elementwise.values())
        all_reduce = 0.0
        if self._all_reduce is not None:
            all_reduce = 2 * layers * self._all_reduce[mode](tokens * self.model.hidden_size * 2.0)[0]
        total = self._price(q, c, p)[0]
        lm_head, sampler = self._lm_head(len(q))[0], self._sampler(len(q))[0]
        overhead = self.step_overhead_s + self.host_s_per_seq * len(q)
        attention = total - gemm - elementwise - all_reduce - lm_head - sampler - overhead
        return dict(zip(names, (gemm, elementwise, all_reduce, attention, lm_head, sampler, overhead)))

    def describe(self) -> dict:
        """The cost model's name, sources (project, licence, engine and version, device) and where
        each part's times come from, with the out-of-grid count so far; for reports and points.csv."""
        sources = [{"name": s.meta["source"]["name"], "repository": s.meta["source"].get("repository"),
                    "commit": s.meta["source"].get("commit"), "licence": s.meta["licence"],
                    "engine": s.meta["engine"], "engine_version": s.meta["engine_version"],
                    "device": s.meta["device"]["name"],
                    **({"model": s.meta["model"]["name"], "tensor_parallel_size": s.tensor_parallel_size}
                       if s.model is not None else {})} for s in self.sources]
        label = "; ".join(dict.fromkeys(f"{s['name']} {s['engine']} {s['engine_version']}" for s in sources))
        label = f"measured ({label}) on {self.device.name}"
        if self.model.quantization is not None:  # what the layer GEMMs were priced as
            label += f"; weights {self.model.quantization.label}" + (
                " run as FP8 Marlin weight-only (no FP8 tensor cores)" if self.weight_kernel == "weight_only"
                and self.model.quantization.kernel != "weight_only" else "")
        if self.kv_dtype_bytes == 1:
            label += "; fp8 KV cache"
        if self.roofline_parts:  # parts no table covers: say so in the one-line label too
            label += f"; roofline for {', '.join(self.roofline_parts)}"
        return {"name": self.name, "kind": "measured", "label": label,
                "device": self.device.name, "sources": sources, "parts": dict(self.parts),
                "roofline_parts": list(self.roofline_parts),
                "roofline_efficiency": {"gemm_flops": self.flops_efficiency, "memory_bandwidth": self.bandwidth_efficiency},
                "step_overhead_s": self.step_overhead_s, "host_s_per_seq": self.host_s_per_seq,
                "cuda_graph_max_tokens": self.cuda_graph_max_tokens,
                "steps": self.num_predictions,
                "out_of_grid_steps": self.out_of_grid_steps, "out_of_grid_by_part": dict(self.out_of_range)}
