"""What a planning report's header says was run (`experiments.planning.report` for a sweep,
`experiments.planning.capacity_report` for a capacity search): the deployment, the trace, the KV
pool, the layouts a `layouts:` axis skipped, what priced the steps, each device's figures and
vLLM's defaults applied; with `format_cell` and `is_missing`, the cell text both reports use."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from experiments.config import POOLS, ClosedLoopTrace, FileTrace, SweepConfig, layouts_of
from experiments.point import device_name
from traces.readers.load_result import UNUSED_NOTE


def is_missing(value) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def deployment_line(points: pd.DataFrame, base: SweepConfig, cost_note: str) -> str:
    """'Model **m** on **d**' when every point shares them, else which points run what; a
    cluster whose pools run on different devices names each pool's (`by_pool`)."""
    if "model" in points and "device" in points and len(points):
        devices = by_pool(points, "device", "**{value}**", "**{value}** ({pool} pool)", " and ")
        shared = pd.DataFrame({"model": points["model"], "device": devices, "point_id": points["point_id"]})
        if shared[["model", "device"]].drop_duplicates().shape[0] > 1:
            groups = shared.groupby(["model", "device"], sort=False)["point_id"]
            where = "; ".join(f"**{m}** on {d} ({_point_list(ids)})" for (m, d), ids in groups)
            return f"Models and devices differ by point (each label names them): {where}; cost model " \
                   f"**{base.cost_model}** {cost_note}."
        return f"Model **{points['model'].iloc[0]}** on {devices.iloc[0]}; cost model **{base.cost_model}** {cost_note}."
    return f"Model **{base.model}** on **{device_name(base)}**; cost model **{base.cost_model}** {cost_note}."


def by_pool(points: pd.DataFrame, column: str, one: str = "{value}", each: str = "{pool} pool: {value}",
            joined: str = "; ") -> pd.Series:
    """Per point, `one` of its `column`; for a `cluster:` point whose pools differ in it
    (`prefill_<column>` / `decode_<column>`, experiments.point.simulate_cluster), `each` of every
    pool, `joined`: "prefill pool: A; decode pool: B". The unprefixed column is the decode pool's
    alone, so a report that read only it named one pool for both."""
    def text(row: pd.Series) -> str:
        values = [row.get(f"{pool}_{column}") for pool in POOLS]
        if any(is_missing(v) for v in values) or values[0] == values[1]:
            return one.format(value=row[column])
        return joined.join(each.format(pool=pool, value=v) for pool, v in zip(POOLS, values))

    return points.apply(text, axis=1) if len(points) else pd.Series(dtype=object)


def _point_list(ids) -> str:
    ids = [int(i) for i in ids]
    return ("point " if len(ids) == 1 else "points ") + ", ".join(map(str, ids))


def trace_line(first: pd.Series, base: SweepConfig) -> str:
    """What the trace is and the rate it offered; a replayed file is not called sampled."""
    trace = base.trace
    offered = format_cell(first.get("offered_qps", float("nan")))
    n = int(first["num_requests"])
    measured = f"offered {offered} QPS (measured over the arrivals: (n − 1) / span"
    if isinstance(trace, FileTrace):
        scaled = f", time-scaled to a mean of {trace.qps:g} QPS" if trace.qps else ", at the file's own times"
        source = first.get("trace_source", trace.path)
        return f"Trace: replayed from the file {source}{scaled}; {n} requests, {measured})."
    if isinstance(trace, ClosedLoopTrace):
        return (f"Trace: {first.get('trace_source', 'closed loop')}; {n} requests, {measured}; in a closed loop "
                "the rate is an outcome, not an input).")
    if trace.kind == "stages":
        rates = ", ".join(f"{s.rate:g}{f'->{s.rate_end:g}' if s.rate_end else ''}/s for {s.duration_s:g} s"
                          for s in trace.stages)
        return f"Trace: {first.get('trace_source', 'stages')}: {rates}; {n} requests, {measured})."
    arrival = getattr(trace, "arrival", "poisson")
    source = {"profile": first.get("trace_source", "profile"),
              "lengths_file": f"lengths from the file {first.get('trace_source', '')} (in file order)"}.get(
        trace.kind, f"generated (kind {trace.kind})")
    if arrival == "constant":
        return f"Trace: {source}; {n} requests at a constant {trace.qps:g} QPS; {measured})."
    return (f"Trace: {source}; {n} requests with sampled {arrival} arrivals at a nominal {trace.qps:g} QPS; "
            f"{measured}; a sampled trace differs slightly from its nominal rate).")


def header_lines(points: pd.DataFrame, base: SweepConfig, devices: tuple = ()) -> list[str]:
    ok = points[points["error"].isna()] if "error" in points else points
    lines = [deployment_line(points, base, "(what prices each step is stated below)")]
    if ok.empty:
        return lines + ["Every point failed: see the errors below."]
    lines += cost_model_lines(ok) + device_lines(ok, base, devices) + vllm_defaults_lines(base) + layout_lines(base)
    first = ok.iloc[0]
    lines.append(trace_line(first, base))
    skipped = int(first.get("trace_rows_rejected", 0) or 0)
    if skipped:
        lines.append(f"Trace rows skipped as invalid: {skipped} ({first.get('trace_rows_rejected_detail', '')}).")
    ignored = ignored_trace_columns(ok)
    if ignored and not isinstance(base.trace, ClosedLoopTrace):  # a sessions file's trace line names its own
        lines.append(f"Trace columns ignored (not columns of the file's format; trace.strict: true refuses them): "
                     f"{ignored}.")
    unused = ignored_trace_columns(ok, "trace_unused_columns")
    if unused:
        lines.append(f"Trace columns not used: {unused} ({UNUSED_NOTE}; requests.parquet's request_id is that "
                     "number, not the file's).")
    truncated = ok["truncated"].fillna(0).astype(int) if "truncated" in ok else pd.Series(dtype=int)
    if truncated.gt(0).any():
        at = ", ".join(f"{int(n)} at {label}" for label, n in zip(ok["label"], truncated) if n > 0)
        lines.append(f"Truncated requests (engine.on_too_long: truncate — output cut at max_model_len, as vLLM's "
                     f"'length' finish; not counted as completed): {at}.")
    slo = ", ".join(f"{k} ≤ {v:g}" for k, v in base.slo.items()) or "none set"
    lines.append(f"SLOs (percentiles over the whole run): {slo}.")
    if base.goodput:
        thresholds = ", ".join(f"{k} ≤ {v:g}" for k, v in base.goodput.items())
        lines.append(f"Goodput = completed requests per second meeting every per-request threshold ({thresholds}).")
    lines.append(kv_pool_line(ok, base))
    return lines


def ignored_trace_columns(points: pd.DataFrame, column: str = "trace_ignored_columns") -> str:
    """The unknown columns the points' trace files had, which the readers ignored (the
    `trace_ignored_columns` cells, experiments.config.file_trace_info), as "a, b" ("a, b; c" when
    points read different files); "" when none. Said whether or not a row was rejected: the report
    and the command line's warning both take it from here. `column="trace_unused_columns"`: the
    defined columns not used (a canonical file's request_id)."""
    cells = points[column] if column in points else pd.Series(dtype=object)
    return "; ".join(dict.fromkeys(c for c in cells.dropna() if c))


def kv_pool_line(ok: pd.DataFrame, base: SweepConfig) -> str:
    """The KV pools of the finished points: colocated points' `num_gpu_blocks` per replica, and a
    `cluster:` point's each pool's (`prefill_num_gpu_blocks` / `decode_num_gpu_blocks` of its
    instances, with its `<pool>_block_size`; experiments.point.simulate_cluster), so neither
    pool stands for both. A DP engine's count is each rank's (every DP rank its own pool,
    experiments.deployment.build_schedulers), so it is said per DP rank."""
    cluster = ok["prefill_num_gpu_blocks"].notna() if "prefill_num_gpu_blocks" in ok else pd.Series(False, index=ok.index)

    def blocks(rows: pd.DataFrame, prefix: str) -> str:
        counts = ", ".join(str(b) for b in sorted({int(b) for b in rows[f"{prefix}num_gpu_blocks"]}))
        sizes = sorted({int(b) for b in rows[f"{prefix}block_size"].dropna()}) if f"{prefix}block_size" in rows else []
        return f"{counts} blocks of {'/'.join(map(str, sizes or [base.engine.block_size]))} tokens"

    def unit(rows: pd.DataFrame, prefix: str, plain: str) -> str:  # a DP engine's blocks are per rank
        ranks = rows[f"{prefix}data_parallel_size"] if f"{prefix}data_parallel_size" in rows else pd.Series([1])
        if (ranks.fillna(1) <= 1).all():
            return plain
        return "per DP rank" if (ranks > 1).all() else f"{plain} (per DP rank where data_parallel_size > 1)"

    parts = [f"{blocks(ok[~cluster], '')} {unit(ok[~cluster], '', 'per replica')}"] if (~cluster).any() else []
    parts += [f"{pool} pool {blocks(ok[cluster], pool + '_')} {unit(ok[cluster], pool + '_', 'per instance')}"
              for pool in POOLS if cluster.any()]
    return (f"KV pool: {'; '.join(parts)} (differs by point when the token budget changes the activation memory)."
            + kv_groups_note(base))


def kv_groups_note(base: SweepConfig) -> str:
    """What a KV block is for a model with sliding-window layers (`profiler.kv_cache_groups.groups_note`)."""
    from profiler import get_model_spec
    from profiler.kv_cache_groups import groups_note

    try:
        return groups_note(get_model_spec(base.model), hybrid=base.engine.scheduler == "vllm_v1")
    except ValueError:
        return ""


def layout_lines(base: SweepConfig) -> list[str]:
    """With `layouts: {gpus: N}`: what it enumerated (`experiments.planning.layouts`) and each
    layout it skipped with the reason, so none is left out silently; [] without it."""
    if base.layouts is None:
        return []
    valid, skipped = layouts_of(base)
    line = (f"Layouts (layouts.gpus: {base.layouts.gpus}): {len(valid)} of {len(valid) + len(skipped)} layouts of "
            f"{base.layouts.gpus} GPUs run ({'; '.join(layout.text() for layout in valid)}); per-GPU columns divide "
            "by the GPUs of each point.")
    if skipped:
        line += " Skipped: " + "; ".join(f"{layout.text()} — {why}" for layout, why in skipped) + "."
    return [line]


def cost_model_lines(points: pd.DataFrame) -> list[str]:
    """What priced the steps of the (finished) points: each point's `cost_model_label`
    (experiments.point: the measured tables and their sources, or the roofline and why), once when
    every point shares it, and how many steps fell outside the measured grids (priced by the
    roofline scaled from the grid's edge)."""
    if "cost_model_label" not in points or points["cost_model_label"].isna().all():
        return []
    points = points[points["cost_model_label"].notna()]
    labels = by_pool(points, "cost_model_label")  # a cluster's pools on different devices: each pool's
    if labels.nunique() == 1:
        lines = [f"Step times: {labels.iloc[0]}."]
    else:
        lines = ["Step times: " + "; ".join(f"{label} ({_point_list(ids)})"
                                            for label, ids in points.groupby(labels, sort=False)["point_id"]) + "."]
    each = {str(v) for c in ("cost_model_label", "prefill_cost_model_label") if c in points
            for v in points[c].dropna()}  # every pool's label, for the notes on what they mean
    if any(label.startswith("roofline") for label in each):
        lines.append("Roofline step times are estimates from datasheet figures and efficiencies fitted to measured "
                     "kernel tables (see the device figures), not measurements of this model.")
    elif any("roofline for" in label for label in each):
        lines.append("The parts named as priced by the roofline are estimates (datasheet figures and fitted "
                     "efficiencies, see the device figures); the rest interpolates measured kernel times.")
    if "cost_model_steps_out_of_range" in points:  # a cluster's: the decode pool's, plus the prefill pool's
        out = points["cost_model_steps_out_of_range"].fillna(0).astype(int)
        if "prefill_cost_model_steps_out_of_range" in points:
            out = out + points["prefill_cost_model_steps_out_of_range"].fillna(0).astype(int)
        if out.gt(0).any():
            steps = _step_counts(points)
            at = ", ".join(f"{_share_text(n, total)} at {label}"
                           for label, n, total in zip(points["label"], out, steps) if n > 0)
            lines.append(f"Steps outside the measured grids (priced by the roofline scaled from the grid's edge): {at}.")
    return lines


def _step_counts(points: pd.DataFrame) -> list[float]:
    """Each point's steps (a sweep's `num_steps`, a capacity search's `cost_model_steps`: its
    trials' summed); NaN for a cluster (its prefill pool's steps are not counted) or where unknown."""
    column = "num_steps" if "num_steps" in points else "cost_model_steps"
    if column not in points or "prefill_cost_model_steps_out_of_range" in points:
        return [math.nan] * len(points)
    return points[column].astype(float).tolist()


def _share_text(count: int, steps: float) -> str:
    """'4.1 % of 1,146,000 steps (47,054)', or the bare count without a step total."""
    if not steps > 0:
        return str(count)
    return f"{count / steps:.1%} of {int(steps):,} steps ({count:,})"


def device_lines(points: pd.DataFrame, base: SweepConfig, devices: tuple = ()) -> list[str]:
    """The device figures the points were priced with (profiler device spec `describe()`): memory,
    dense BF16 FLOP/s, bandwidth, GPU link and the efficiencies, with their sources; every
    cluster pool's device (`prefill_device` beside `device`, the decode pool's). Each device once,
    found by its name among `devices` (the points' `device:` values as run: built-in names, files,
    inline mappings; `point_devices`), the base's and its pools', else the built-ins; two devices
    of one name with different figures get a line each. A device found nowhere (a report of
    another run's points) is said to be so, never described by another device's figures."""
    from profiler import get_device_spec

    columns = [c for c in ("prefill_device", "device") if c in points]
    names = list(dict.fromkeys(str(v) for c in columns for v in points[c].dropna())) or [device_name(base)]
    own = [*devices, base.device] + [getattr(base.cluster, pool).device for pool in POOLS
                                     if base.cluster is not None and getattr(base.cluster, pool).device is not None]
    known: dict[str, object] = {}  # each distinct device (by its description), in order
    for device in own:
        spec = get_device_spec(device)
        known.setdefault(repr(sorted(spec.describe().items())), spec)
    lines = []
    for name in names:
        specs = [spec for spec in known.values() if spec.name == name]
        if not specs:
            try:
                specs = [get_device_spec(name)]  # a built-in
            except ValueError:
                lines.append(f"Device {name}: its figures are not known to this report (a file or inline device "
                             "of points not given to it).")
                continue
        for spec in specs:
            d = spec.describe()
            link = d.get("gpu_link") or {}
            lines.append(f"Device {d['name']}: {d['memory_gib']:g} GiB, {d['dense_bf16_tflops']:g} TFLOP/s dense "
                         f"BF16, {d['memory_bandwidth_gb_per_s']:g} GB/s; GPU link {link.get('kind', '?')} "
                         f"{link.get('gb_per_s_per_direction', float('nan')):g} GB/s per direction; roofline "
                         f"efficiencies GEMM {d['gemm_flops_efficiency']:.2f} of peak, bandwidth "
                         f"{d['memory_bandwidth_efficiency']:.2f} ({d.get('efficiency_source', 'assumed')}); figures "
                         f"from {d.get('source', 'the device file')}.")
    return lines


def vllm_defaults_lines(base: SweepConfig) -> list[str]:
    """What vLLM 0.19 picks for the vllm_v1 engine keys the config left unset, on the base
    point's card (`experiments.vllm_defaults.applied_defaults`); [] when none were left unset."""
    from experiments.vllm_defaults import DEFAULTED_KEYS, applied_defaults
    from profiler import get_device_spec

    applied = applied_defaults(base.engine, get_device_spec(base.device))
    if not applied:
        return []
    card = applied.pop("card")
    keys = ", ".join(f"{k} {v} (vLLM's --{DEFAULTED_KEYS[k].replace('_', '-')})" for k, v in applied.items())
    return [f"vLLM 0.19 defaults applied to unset engine keys: {keys}, for {card} (EngineArgs.get_batch_defaults, "
            "OpenAI API server); a point on another card takes that card's (its chunk_size and max_num_seqs columns)."]


def point_devices(points: list[dict]) -> tuple:
    """The `device:` values of point dicts as `load_config` gives them (paths absolute): each
    point's and each of its cluster pools', for `device_lines`."""
    found = []
    for point in points:
        found.append(point.get("device", SweepConfig.model_fields["device"].default))
        cluster = point.get("cluster") or {}
        found += [cluster[pool]["device"] for pool in POOLS
                  if isinstance(cluster.get(pool), dict) and cluster[pool].get("device") is not None]
    return tuple(found)


def format_cell(value) -> str:
    """A table cell: yes/no for booleans, 4 significant digits, 'n/a' for NaN or a missing value."""
    if value is None or value is pd.NA:
        return "n/a"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating)):
        return "n/a" if math.isnan(value) else f"{value:.4g}"
    return str(value)
