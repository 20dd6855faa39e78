"""`FittedCostModel`: a step's time from per-op regressors fitted on a measured profile.

A step of T tokens over S sequences costs (ops and counts: `ops.py`)

    Σ_token ops calls × op(T) + Σ_sequence ops op(S)
    + layers × (Σ_prefill seqs attention_prefill(q, c) + attention_decode(decodes))

where a one-token prefill chunk counts as a decode (the same work: one query over its context).

Each profiled op is priced by its `RooflineResidualRegressor`; an op the profile lacks is priced
by the roofline tuned on the ops it has (`roofline_tuning`), the all-reduce by the ring model of
`roofline.py` (it needs tp devices to measure), and, without a `cpu_overhead` profile, the
per-step overhead is the roofline's assumed `STEP_OVERHEAD_S`.

Speed: the token and sequence sums are tabulated once per model (`LineTable`) and the attention
corrections on log grids (`GridTable`), so `predict_step_s` is two interpolations, a few numpy
reductions and no scikit-learn call: microseconds a step.
"""
from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path

import numpy as np

from profiler.atomic_write import write_whole
from profiler.cost_model import step_arrays
from profiler.device_spec import BUILTIN_DEVICES, DeviceSpec
from profiler.lookup import GridTable, LineTable
from profiler.model_spec import ModelSpec
from profiler.ops import DECODE_BATCH, PREFILL_SEQ, SEQS, TOKENS, Op, OpCatalogue
from profiler.profile_data import Profile, ProfileError
from profiler.regressor import RooflineResidualRegressor
from profiler.roofline import STEP_OVERHEAD_S, ring_all_reduce_time_s
from profiler.roofline_tuning import RooflineEfficiency, tune_roofline

MIN_ROWS = 4  # fewer profiled shapes than this: the op falls back to the tuned roofline
# The ops that make up most of a step (the layer GEMMs and both attention kernels): each needs
# MIN_ROWS profiled shapes, or `profile`, `fit` and `cost_model: profile:DIR` refuse the profile
# (`check_fit_coverage`) instead of pricing the step from a roofline tuned on almost nothing. The
# other ops (element-wise, LM head, sampler, host overhead) may fall back, and the fit report names them.
REQUIRED_OPS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "attention_prefill", "attention_decode")
STATISTICS = ("median", "min", "mean")
_TABLE_MAX_TOKENS = 1 << 17  # step tokens tabulated; beyond, in proportion (LineTable)
_TABLE_MAX_SEQS = 1 << 14
_TABLE_DENSE = 1 << 14  # counts tabulated one by one (alignment effects are per count)


def alignment_features(n: np.ndarray) -> list[np.ndarray]:
    """Tile-alignment features of a count of rows n: min(trailing zero bits of n, 7), and the
    fraction of padding rows, ceil(n / t) t / n − 1, for tiles t = 16, 64 and 128.

    GEMM kernels block the row dimension (CPU sgemm micro-kernels by 8-16 rows, GPU tiles by 64-256),
    so n = 7 can cost more than n = 8 and n = tile + 1 almost as much as 2 tiles (REFERENCE.md
    §1.4); the log count alone cannot express that.
    """
    n = np.maximum(np.asarray(n, dtype=np.int64), 1)
    trailing_zeros = np.minimum(np.log2(n & -n), 7.0)
    padding = [np.ceil(n / t) * t / n - 1.0 for t in (16, 64, 128)]
    return [trailing_zeros, *padding]


def _sequences(op: Op, keys: dict[str, np.ndarray], n: int) -> np.ndarray:
    """Sequences one attention call walks: B for a decode batch, 1 for a prefill; 0 otherwise."""
    if op.driver == DECODE_BATCH:
        return np.asarray(keys["batch_size"], dtype=np.float64)
    return np.full(n, 1.0 if op.driver == PREFILL_SEQ else 0.0)


def op_features(catalogue: OpCatalogue, rates: dict, op: Op, keys: dict[str, np.ndarray]) -> np.ndarray:
    """Regressor inputs of `op` at its key rows: [t_compute_s, t_memory_s, n_seq, log key...,
    alignment...].

    t_compute_s = FLOPs / rates["peak_flops"], t_memory_s = bytes / rates["mem_bandwidth_bytes_per_s"]
    (`OpCatalogue.work`); log key is log(count) for counts ≥ 1 and log(1 + c) for context tokens;
    ops with one key (sized by the step's tokens or sequences) add `alignment_features` of it.

    Returns:
        (n, 3 + len(op.key)) for attention, (n, 8) for the other ops.
    """
    flops, num_bytes = catalogue.work(op, keys)
    columns = [flops / rates["peak_flops"], num_bytes / rates["mem_bandwidth_bytes_per_s"],
               _sequences(op, keys, len(flops))]
    for k in op.key:
        values = np.asarray(keys[k], dtype=np.float64)
        columns.append(np.log1p(values) if k == "context_tokens" else np.log(np.maximum(values, 1.0)))
    if len(op.key) == 1:
        columns += alignment_features(keys[op.key[0]])
    return np.column_stack(columns)


def profiled_shapes(profile: Profile, op: Op) -> int:
    """Distinct shapes (key rows) the profile timed for `op`."""
    rows = profile.rows(op.name)
    return len(rows[list(op.key)].drop_duplicates()) if len(rows) else 0


def check_fit_coverage(profile: Profile, directory) -> None:
    """Refuse a profile too thin to fit: every `REQUIRED_OPS` op needs `MIN_ROWS` distinct shapes.

    Raises:
        ProfileError: one line naming the directory, each short op with its count of shapes, and
            the remedy.
    """
    counts = {op.name: profiled_shapes(profile, op) for op in profile.catalogue.ops if op.name in REQUIRED_OPS}
    short = {name: n for name, n in counts.items() if n < MIN_ROWS}
    if short:
        timed = sum(len(t) for t in profile.tables.values())
        listed = ", ".join(f"{name} has {n}" for name, n in short.items())
        raise ProfileError(f"{directory}: too few profiled shapes to fit a cost model "
                           f"({timed} shape{'s' * (timed != 1)} timed in all): {listed}; each of {', '.join(REQUIRED_OPS)} needs at least {MIN_ROWS}. "
                           "Profile again with a larger --budget-s (or import a table that covers them)")


def fit_op(catalogue: OpCatalogue, rates: dict, op: Op, rows, statistic: str = "median",
           **params) -> RooflineResidualRegressor:
    """Fit one op's regressor on its profile rows (a DataFrame with the key and time columns).

    Trees are 2 deep on one key and 3 deep on two (attention), unless `params` say otherwise.
    """
    params.setdefault("max_depth", 2 if len(op.key) == 1 else 3)
    X = op_features(catalogue, rates, op, {k: rows[k].to_numpy() for k in op.key})
    return RooflineResidualRegressor(**params).fit(X, rows[f"time_{statistic}_s"].to_numpy())


class FittedCostModel:
    """Implements `CostModel.predict_step_s` from fitted per-op regressors (module docstring).

    Build it with `fit` (or `load`); the constructor takes the fitted parts.

    Args:
        catalogue: the ops of the model being priced (model, tp, element widths).
        rates: {"peak_flops", "mem_bandwidth_bytes_per_s"}: the scale of the roofline features.
        regressors: op name → fitted regressor.
        fallback: the tuned roofline for ops without a regressor.
        device: datasheet figures for the all-reduce (needed when tp > 1).
        profiled_max: driver → the largest profiled count (step tokens, sequences, prefill
            query tokens, decode batch) every op of that driver has; larger steps are counted in
            `out_of_range`.
        source: where the fit came from (the profile directory), for reports.

    Attributes:
        num_predictions: steps priced; out_of_range: Counter of steps beyond `profiled_max`, by
            driver ("tokens", "seqs", "prefill_seq", "decode_batch").

    Raises:
        ValueError: tp > 1 without a device (the all-reduce cannot be priced).
    """

    def __init__(self, catalogue: OpCatalogue, rates: dict, regressors: dict[str, RooflineResidualRegressor],
                 fallback: RooflineEfficiency, *, device: DeviceSpec | None = None,
                 profiled_max: dict[str, float] | None = None, source: str = "") -> None:
        if catalogue.tp > 1 and device is None:
            raise ValueError("tensor_parallel_size > 1 needs a device spec to price the all-reduce")
        self.catalogue = catalogue
        self.rates = dict(rates)
        self.regressors = dict(regressors)
        self.fallback = fallback
        self.device = device
        self.profiled_max = dict(profiled_max or {})
        self.source = source
        self.num_predictions = 0
        self.out_of_range: Counter = Counter()
        self._build_tables()

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def fit(cls, profile: Profile, statistic: str = "median", *, device: DeviceSpec | None = None,
            source: str = "", **params) -> "FittedCostModel":
        """Fit every op with at least `MIN_ROWS` profiled shapes; tune the fallback roofline.

        Args:
            profile: the measured profile.
            statistic: which per-call time to fit: "median" (default: the median of every sample
                of every re-timing round, which a busy spell cannot move), "min" or "mean".
            device: datasheet figures for the all-reduce; default the profile's built-in spec.
            params: regressor hyper-parameters (`RooflineResidualRegressor`).

        Raises:
            ValueError: an unknown statistic.
        """
        if statistic not in STATISTICS:
            raise ValueError(f"unknown statistic {statistic!r}; valid: {', '.join(STATISTICS)}")
        catalogue, rates = profile.catalogue, profile.meta["rates"]
        regressors, samples, profiled_max = {}, [], {}
        for op in catalogue.ops:
            rows = profile.rows(op.name)
            if len(rows) < MIN_ROWS:
                continue
            regressors[op.name] = fit_op(catalogue, rates, op, rows, statistic, **params)
            X = op_features(catalogue, rates, op, {k: rows[k].to_numpy() for k in op.key})
            samples.append((np.full(len(rows), op.family), X[:, 0], X[:, 1], rows[f"time_{statistic}_s"]))
            largest = float(rows[op.key[0]].max())
            profiled_max[op.driver] = min(profiled_max.get(op.driver, largest), largest)
        fallback = (tune_roofline(*(np.concatenate(parts) for parts in zip(*samples)))
                    if samples else RooflineEfficiency())
        device = device or BUILTIN_DEVICES.get(profile.meta["device"].get("spec_name") or "")
        return cls(catalogue, rates, regressors, fallback, device=device, profiled_max=profiled_max,
                   source=source)

    def for_model(self, model: ModelSpec) -> "FittedCostModel":
        """The same regressors pricing another model's shapes (same tp and element widths).

        The features are roofline terms, so a fit on one model's ops transfers to another's
        (checked on Vidur's Llama-2-7B → Llama-3-8B rows).
        """
        other = copy.copy(self)
        c = self.catalogue
        other.catalogue = OpCatalogue(model, c.tp, c.dtype_bytes, c.kv_dtype_bytes)
        other.out_of_range = Counter()
        other._build_tables()
        return other

    # -- per op ------------------------------------------------------------------------------

    def op_time_s(self, op_name: str, keys: dict[str, np.ndarray]) -> np.ndarray:
        """Seconds per call of one op at its key rows, (n,).

        Raises:
            KeyError: an op not in the catalogue, or a key column missing.
        """
        op = self.catalogue.op(op_name)
        X = op_features(self.catalogue, self.rates, op, keys)
        if op.name in self.regressors:
            return self.regressors[op.name].predict(X)
        if op.family == "all_reduce":
            num_bytes = X[:, 1] * self.rates["mem_bandwidth_bytes_per_s"]
            return np.array([ring_all_reduce_time_s(b, self.device, self.catalogue.tp) for b in num_bytes])
        if op.family == "cpu_overhead":
            return np.full(len(X), STEP_OVERHEAD_S)
        return self.fallback.op_time_s(op.family, X[:, 0], X[:, 1])

    def _summed_table(self, driver: str, max_value: int) -> LineTable:
        ops = [op for op in self.catalogue.ops if op.driver == driver]
        layers = self.catalogue.model.num_layers

        def total_s(n: np.ndarray) -> np.ndarray:
            return sum(op.calls_per_step(layers) * self.op_time_s(op.name, {"num_tokens": n}) for op in ops)
        return LineTable(total_s, max_value, dense_up_to=min(max_value, _TABLE_DENSE))

    def _build_tables(self) -> None:
        self._token_table = self._summed_table(TOKENS, _TABLE_MAX_TOKENS)
        self._seq_table = self._summed_table(SEQS, _TABLE_MAX_SEQS)
        flops, num_bytes = self.catalogue.attention_work(np.eye(3)[0], np.eye(3)[1], np.eye(3)[2])
        self._attention_s_per_unit = (flops[0] / self.rates["peak_flops"],
                                      num_bytes[1] / self.rates["mem_bandwidth_bytes_per_s"],
                                      num_bytes[2] / self.rates["mem_bandwidth_bytes_per_s"])
        self._attention = {}
        for name in ("attention_prefill", "attention_decode"):
            reg = self.regressors.get(name)
            if reg is None:
                self._attention[name] = None
                continue
            a_max, b_max = np.exp(reg.key_range_[1, 0]), np.expm1(reg.key_range_[1, 1])
            logs = lambda a, b: np.column_stack((np.log(a), np.log1p(b)))  # noqa: E731
            self._attention[name] = (reg.base_coef_.tolist(),
                                     GridTable(lambda a, b, r=reg: r.correction(logs(a, b)), a_max, b_max))

    def _attention_s(self, name: str, pairs, kv_tokens, query_tokens, num_seqs, key_a, key_b):
        """One layer's attention kernel time(s) from group sums (`OpCatalogue.attention_work`'s
        terms, pre-divided by the rates in `_build_tables`); floats in, a float out, or arrays
        (n,) in and out."""
        s_per_pair, s_per_kv_token, s_per_query_token = self._attention_s_per_unit
        t_c = s_per_pair * pairs
        t_m = s_per_kv_token * kv_tokens + s_per_query_token * query_tokens
        fitted = self._attention[name]
        if fitted is None:
            out = self.fallback.op_time_s(name, t_c, t_m)
            return float(out) if np.ndim(out) == 0 else out
        w, grid = fitted
        if np.ndim(t_c) == 0:
            base = max(w[0] + w[1] * max(t_c, t_m) + w[2] * t_c + w[3] * t_m + w[4] * num_seqs, 1e-9)
        else:
            base = np.maximum(w[0] + w[1] * np.maximum(t_c, t_m) + w[2] * t_c + w[3] * t_m + w[4] * num_seqs, 1e-9)
        return base * grid(key_a, key_b)

    # -- per step ----------------------------------------------------------------------------

    def breakdown(self, query_tokens: np.ndarray, context_tokens: np.ndarray,
                  is_prefill: np.ndarray) -> dict[str, float]:
        """Seconds per part of one step: `token_ops_s` (every op sized by the step's tokens, over
        all layers), `sequence_ops_s` (LM head, sampler, per-step overhead), `attention_prefill_s`,
        `attention_decode_s` (all layers); all 0.0 for an empty batch.

        Args: aligned arrays (num_seqs,) as `CostModel.predict_step_s`.

        Raises:
            ValueError: the arrays differ in length.
        """
        q, c, prefill = step_arrays(query_tokens, context_tokens, is_prefill)
        names = ("token_ops_s", "sequence_ops_s", "attention_prefill_s", "attention_decode_s")
        if q.size == 0:
            return dict.fromkeys(names, 0.0)
        return dict(zip(names, self._parts(q, c, prefill)))

    def predict_step_s(self, query_tokens: np.ndarray, context_tokens: np.ndarray,
                       is_prefill: np.ndarray) -> float:
        """Duration (s) of one step; 0.0 for an empty batch. Arrays as in `CostModel`."""
        q = np.asarray(query_tokens, dtype=np.float64)
        if q.size == 0:
            return 0.0
        return sum(self._parts(q, np.asarray(context_tokens, dtype=np.float64), np.asarray(is_prefill, dtype=bool)))

    def _parts(self, q: np.ndarray, c: np.ndarray, prefill: np.ndarray) -> tuple[float, float, float, float]:
        """(token ops, sequence ops, prefill attention, decode attention) seconds of one step.

        Scalar arithmetic where a group is one sequence or a sum (the common steps: one prefill
        chunk, any number of decodes), numpy only for several prefill sequences.
        """
        layers = self.catalogue.model.num_layers
        num_seqs, num_tokens = q.size, float(q.sum())
        # A one-token prefill chunk (a prompt's last token) attends as a decode does: one query over
        # its context. The engine's attention batches it with the decodes, so it is priced with them
        # (pricing it as a prefill call over-priced such steps by 8-30 % on the CPU, BENCHMARKS.md).
        prefill = prefill & (q > 1.0)
        prefill_index = np.flatnonzero(prefill)
        num_prefill = prefill_index.size
        self._count(TOKENS, num_tokens)
        self._count(SEQS, num_seqs)
        prefill_s = decode_s = 0.0
        if num_prefill == 1:
            qp, cp = float(q[prefill_index[0]]), float(c[prefill_index[0]])
            self._count(PREFILL_SEQ, qp)
            prefill_s = layers * self._attention_s("attention_prefill", qp * (cp + (qp + 1) * 0.5), cp + qp,
                                                   qp, 1.0, qp, cp)
        elif num_prefill:
            qp, cp = q[prefill_index], c[prefill_index]
            self._count(PREFILL_SEQ, qp.max())
            prefill_s = layers * float(self._attention_s(
                "attention_prefill", qp * (cp + (qp + 1) * 0.5), cp + qp, qp, 1.0, qp, cp).sum())
        if num_prefill < num_seqs:
            qd, cd = (q, c) if num_prefill == 0 else (q[~prefill], c[~prefill])
            num_decodes, sum_q, sum_c = qd.size, float(qd.sum()), float(cd.sum())
            self._count(DECODE_BATCH, num_decodes)
            pairs = float(qd @ cd) + (float(qd @ qd) + sum_q) * 0.5  # Σ q c + q (q + 1) / 2
            decode_s = layers * self._attention_s("attention_decode", pairs, sum_c + sum_q, sum_q,
                                                  num_decodes, num_decodes, sum_c / num_decodes)
        self.num_predictions += 1
        return self._token_table(num_tokens), self._seq_table(num_seqs), prefill_s, decode_s

    def _count(self, driver: str, value: float) -> None:
        if value > self.profiled_max.get(driver, np.inf):
            self.out_of_range[driver] += 1

    # -- persistence -------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the whole model (regressors, tables) with joblib, whole or not at all
        (`profiler.atomic_write`); returns the path.

        Raises:
            OutputWriteError: the file could not be written (named, with the system's reason).
        """
        import joblib

        return write_whole(path, lambda tmp: joblib.dump(self, tmp, compress=3))

    @staticmethod
    def load(path: str | Path) -> "FittedCostModel":
        """Read a model written by `save`. It unpickles: only for a file you wrote yourself (the
        simulator never calls it; `profiler.shipped.load_fitted` refits from the CSVs instead).

        Raises:
            ValueError: the file does not hold a `FittedCostModel`.
        """
        import joblib

        model = joblib.load(Path(path))
        if not isinstance(model, FittedCostModel):
            raise ValueError(f"{path}: holds a {type(model).__name__}, not a FittedCostModel")
        return model
