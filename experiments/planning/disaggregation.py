"""The xPyD search: for a GPU budget and per-request TTFT/TPOT SLOs, the prefill/decode split and
per-pool tensor parallelism with the most goodput per GPU, against the best colocated layout of
the same GPUs (Sarathi-style chunked prefill, the point's `engine:`).

Goodput as DistServe defines it (Zhong et al., OSDI'24, §2.1 and §6.1): the highest request
rate at which at least `attainment` (90 % in its experiments) of the requests meet *both* the
TTFT and the TPOT SLO, divided by the GPUs used. Here the SLOs are the config's `goodput:`
thresholds (`ttft_s`, `tpot_s`; `e2e_s` too if set), the rate is found by the project's
bisection (`experiments.planning.capacity.find_capacity`) on trials of `num_requests` with warm-up
and drain trimmed, and a rejected request counts as missing its SLOs.

Run:
    .venv/bin/python -m experiments.planning.disaggregation CONFIG.yaml --gpus 8 [--tp 1,2] [--out DIR]

writes `disaggregation.csv` (one row per layout: kind, label, GPUs, capacity, goodput per GPU,
trials), `disaggregation.md` (the table, best first, and the best disaggregated layout against
the best colocated one) and `disaggregation.png` (goodput per GPU of every layout).
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.config import ConfigError, SweepConfig, describe_point, load_config
from experiments.planning.capacity import find_capacity
from experiments.point import run_point
from profiler import get_model_spec

DEFAULT_ATTAINMENT = 0.9  # DistServe's SLO attainment target


@dataclass
class Layout:
    """One way to use the GPUs: `kind` "colocated" or "disaggregated", its point, its GPUs."""

    kind: str
    point: SweepConfig
    gpus: int

    @property
    def label(self) -> str:
        if self.kind == "colocated":
            e = self.point.engine
            return f"colocated {e.replicas}x TP{e.tensor_parallel_size}"
        c = self.point.cluster
        tp = [spec.engine.get("tensor_parallel_size", self.point.engine.tensor_parallel_size)
              for spec in (c.prefill, c.decode)]
        return f"{c.prefill.replicas}P(TP{tp[0]}) {c.decode.replicas}D(TP{tp[1]})"


def layouts(base: SweepConfig, gpus: int, tensor_parallel_sizes: tuple[int, ...] = (1, 2, 4, 8)) -> list[Layout]:
    """Every layout of exactly `gpus` GPUs: colocated replicas × TP, and xPyD with x·TP_p + y·TP_d
    = gpus (x, y >= 1). The pools keep the base's `cluster:` settings (link, chunk sizes, ...) if
    it has one, else a prefill pool with the base engine and a decode pool the same. TP degrees
    the model's heads do not split into are skipped.

    Raises:
        ValueError: gpus < 1, or no valid layout (e.g. only TP degrees the model cannot use).
    """
    if gpus < 1:
        raise ValueError(f"gpus must be >= 1, got {gpus}")
    model = get_model_spec(base.model)
    tps = [tp for tp in sorted(set(tensor_parallel_sizes)) if tp <= gpus and _splits(model, tp)]
    tree = base.model_dump(exclude_unset=True)
    tree.pop("variants", None)
    engine = dict(tree.get("engine", {}))
    engine.pop("replicas", None)
    cluster = tree.pop("cluster", None) or {}
    found = []
    for tp in tps:
        if gpus % tp == 0:
            colocated = {**tree, "engine": {**engine, "tensor_parallel_size": tp, "replicas": gpus // tp,
                                            "router": engine.get("router", "least_outstanding")}}
            found.append(Layout("colocated", SweepConfig.model_validate(colocated), gpus))
    for tp_p in tps:
        for tp_d in tps:
            for x in range(1, gpus // tp_p + 1):
                rest = gpus - x * tp_p
                if rest < tp_d or rest % tp_d:
                    continue
                pools = {}
                for name, replicas, tp in (("prefill", x, tp_p), ("decode", rest // tp_d, tp_d)):
                    spec = dict(cluster.get(name, {}))
                    spec["replicas"] = replicas
                    spec["engine"] = {**spec.get("engine", {}), "tensor_parallel_size": tp}
                    pools[name] = spec
                point = {**tree, "engine": engine, "cluster": {**cluster, **pools}}
                found.append(Layout("disaggregated", SweepConfig.model_validate(point), gpus))
    if not found:
        raise ValueError(f"no layout of {gpus} GPUs with tensor_parallel_size in {tensor_parallel_sizes} "
                         f"for {model.name}")
    return found


def _splits(model, tp: int) -> bool:
    try:
        model.kv_heads_per_rank(tp)
    except ValueError:
        return False
    return True


def slo_attainment(requests: pd.DataFrame, thresholds_s: dict[str, float], trim_fraction: float) -> float:
    """Share of the requests arriving inside the trimmed window that completed within every
    threshold (`ttft_s`, `tpot_s`, `e2e_s`: seconds; a one-token request has no TPOT and meets
    that one). Rejected or truncated requests miss. NaN for no requests.

    Raises:
        ValueError: an unknown threshold key.
    """
    arrivals = requests["arrival_s"].to_numpy()
    if arrivals.size == 0:
        return math.nan
    margin = trim_fraction * (arrivals.max() - arrivals.min())
    window = (arrivals >= arrivals.min() + margin) & (arrivals <= arrivals.max() - margin)
    met = requests["finish_reason"].to_numpy() == "completed"
    for key, limit in thresholds_s.items():
        if key not in ("ttft_s", "tpot_s", "e2e_s"):
            raise ValueError(f"unknown SLO threshold {key!r}; valid: ttft_s, tpot_s, e2e_s")
        values = requests[key].to_numpy()
        met &= (values <= limit) | (np.isnan(values) & (key == "tpot_s"))
    return float(met[window].mean())


def layout_capacity(layout: Layout, thresholds_s: dict[str, float], attainment: float = DEFAULT_ATTAINMENT,
                    qps: tuple[float, float] = (0.5, 8.0), num_requests: int = 1000, seed: int = 0,
                    precision: float = 0.05, trim_fraction: float = 0.1, max_trials: int = 16):
    """Highest QPS at which `layout` meets `attainment` (`slo_attainment`), by bisection.

    Returns:
        `experiments.planning.capacity.CapacityResult` (capacity NaN when even qps[0] fails).
    """
    trace = layout.point.trace
    fields = type(trace).model_fields
    size = {"num_requests" if "num_requests" in fields else "max_requests": num_requests}
    if "seed" in fields:
        size["seed"] = seed

    def at(rate: float) -> SweepConfig:  # a file trace is time-scaled to the rate, cut to num_requests
        return layout.point.model_copy(update={"trace": trace.model_copy(update={"qps": rate, **size})})

    served: dict[float, float] = {}

    def passes(rate: float) -> bool:
        result = run_point(at(rate), trim_fraction=trim_fraction)
        served[rate] = result.row["throughput_rps"]
        return slo_attainment(result.requests, thresholds_s, trim_fraction) >= attainment

    return find_capacity(passes, qps[0], qps[1], precision=precision, max_trials=max_trials,
                         served_qps=served.get)


def search(base: SweepConfig, gpus: int, tensor_parallel_sizes=(1, 2, 4, 8), **capacity_kwargs) -> pd.DataFrame:
    """Capacity and goodput per GPU of every layout (`layouts`), best first.

    Columns: kind, label, gpus, capacity_qps, goodput_per_gpu_qps (capacity / GPUs; 0 when
    even the lowest rate fails), trials.

    Raises:
        ValueError: `base` has no `goodput:` thresholds (the SLOs the search meets).
    """
    if not base.goodput:
        raise ValueError("the xPyD search meets the goodput: thresholds (ttft_s, tpot_s); the config sets none")
    rows = []
    for layout in layouts(base, gpus, tensor_parallel_sizes):
        result = layout_capacity(layout, base.goodput, **capacity_kwargs)
        capacity = result.capacity_qps
        rows.append({"kind": layout.kind, "label": layout.label, "point": describe_point(layout.point),
                     "gpus": gpus, "capacity_qps": capacity,
                     "goodput_per_gpu_qps": 0.0 if math.isnan(capacity) else capacity / gpus,
                     "trials": len(result.trials)})
    frame = pd.DataFrame(rows)
    return frame.sort_values(["goodput_per_gpu_qps", "kind"], ascending=[False, True], ignore_index=True)


def comparison(frame: pd.DataFrame) -> str:
    """One sentence: the best disaggregated layout against the best colocated one."""
    best = {kind: frame[frame["kind"] == kind].iloc[0] for kind in ("disaggregated", "colocated")
            if (frame["kind"] == kind).any()}
    if len(best) < 2:
        return "only one kind of layout was searched"
    d, c = best["disaggregated"], best["colocated"]
    if c["goodput_per_gpu_qps"] > 0:
        ratio = f"{d['goodput_per_gpu_qps'] / c['goodput_per_gpu_qps']:.2f}×"
    else:
        ratio = "∞ (colocated meets the SLOs at no tested rate)"
    return (f"best disaggregated {d['label']}: {d['goodput_per_gpu_qps']:.3f} req/s per GPU; best colocated "
            f"{c['label']}: {c['goodput_per_gpu_qps']:.3f} req/s per GPU; ratio {ratio}")


def write_report(frame: pd.DataFrame, base: SweepConfig, out: Path, attainment: float) -> list[Path]:
    """disaggregation.csv, .md and .png in `out` (each written atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.outputs import save_figure, write_csv, write_text

    out.mkdir(parents=True, exist_ok=True)
    slos = ", ".join(f"{k} ≤ {v:g} s" for k, v in base.goodput.items())
    lines = [f"# xPyD search: {base.model} on {frame['gpus'].iloc[0]} GPUs", "",
             f"Goodput = the highest rate at which ≥ {attainment:.0%} of requests meet {slos} "
             "(DistServe's definition), per GPU.", "", comparison(frame), "",
             "| layout | kind | capacity (req/s) | goodput per GPU (req/s) | trials |", "|---|---|---|---|---|"]
    for _, r in frame.iterrows():
        lines.append(f"| {r['label']} | {r['kind']} | {r['capacity_qps']:.3f} | {r['goodput_per_gpu_qps']:.3f} | "
                     f"{r['trials']} |")
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(frame) + 1.2))
    colours = ["tab:blue" if k == "disaggregated" else "tab:orange" for k in frame["kind"]]
    ax.barh(frame["label"][::-1], frame["goodput_per_gpu_qps"][::-1], color=colours[::-1])
    ax.set_xlabel(f"goodput per GPU (req/s at {attainment:.0%} SLO attainment)")
    ax.set_title("xPyD (blue) vs colocated (orange)")
    fig.tight_layout()
    written = [write_csv(out / "disaggregation.csv", frame),
               write_text(out / "disaggregation.md", "\n".join(lines) + "\n"),
               save_figure(fig, out / "disaggregation.png", dpi=110)]
    plt.close(fig)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--tp", default="1,2,4,8", help="tensor-parallel degrees to try, comma-separated")
    parser.add_argument("--attainment", type=float, default=DEFAULT_ATTAINMENT)
    parser.add_argument("--qps", default="0.5,8", help="starting bracket low,high (req/s)")
    parser.add_argument("--num-requests", type=int, default=1000)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    try:
        base, _ = load_config(args.config)
        tps = tuple(int(t) for t in args.tp.split(","))
        low, high = (float(q) for q in args.qps.split(","))
        frame = search(base, args.gpus, tps, attainment=args.attainment, qps=(low, high),
                       num_requests=args.num_requests)
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}")
        return 2
    out = Path(args.out or f"runs/{base.name}-xpyd")
    write_report(frame, base, out, args.attainment)
    print(frame.to_string(index=False))
    print(comparison(frame))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
