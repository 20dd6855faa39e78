"""Labels of points: `describe_point` (one point's deployment, 'sarathi chunk=512') and
`point_labels` (a sweep's points by what tells them apart)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from experiments.config.engine import CHUNKING_SCHEDULERS, DraftModel
from experiments.config.merging import _flatten
from experiments.config.sweep import SweepConfig
from profiler import get_device_spec


def describe_point(point: SweepConfig) -> str:
    """Short label of a point, e.g. 'sarathi chunk=512' or 'vllm'."""
    return " ".join(text for _, text in _describe_parts(point))


# Parts of `describe_point` that qualify the deployment rather than shape it: a sweep's labels
# leave them out where every point shares them (`point_labels`: a label names what differs).
_QUALIFIER_PARTS = {"router", "policy", "gamma", "preemption"}


def _describe_parts(point: SweepConfig) -> list[tuple[str, str]]:
    """`describe_point`'s parts as (what it names, text): ('scheduler', 'sarathi'), ('chunk', 'chunk=512')..."""
    e = point.engine
    parts = [("scheduler", e.scheduler)]
    if e.scheduler in CHUNKING_SCHEDULERS:
        parts.append(("chunk", f"chunk={e.chunk_size}"))
    elif e.max_num_batched_tokens:
        parts.append(("budget", f"budget={e.max_num_batched_tokens}"))
    if e.split_n:
        parts.append(("split_n", f"N={e.split_n}"))
        if isinstance(e.draft, DraftModel):
            parts.append(("draft", f"draft={e.draft.model}"))
    for key, short in (("tensor_parallel_size", "tp"), ("pipeline_parallel_size", "pp"), ("replicas", "x"),
                       ("data_parallel_size", "dp")):
        if getattr(e, key) > 1:
            parts.append((key, f"{short}={getattr(e, key)}"))
    if e.enable_expert_parallel:
        parts.append(("ep", f"ep={e.data_parallel_size * e.tensor_parallel_size}"))
    if e.replicas > 1:
        router = e.router
        if e.router == "prefix_aware" and e.router_overlap_weight != 1:
            router += f" overlap_weight={e.router_overlap_weight:g}"
        parts.append(("router", router))
    if e.policy != "fcfs":
        parts.append(("policy", e.policy))
    if getattr(point.trace, "arrival", None) == "gamma" and point.trace.burstiness is not None:
        parts.append(("gamma", f"gamma={point.trace.burstiness:g}"))
    if e.preemption != "recompute":
        parts.append(("preemption", e.preemption))
    if point.cluster is not None:  # disaggregated: "2P3D", with each pool's TP (PP, DP, EP) when one is > 1
        pools = [(spec.replicas, spec.engine.get("tensor_parallel_size", e.tensor_parallel_size),
                  spec.engine.get("pipeline_parallel_size", e.pipeline_parallel_size),
                  spec.engine.get("data_parallel_size", e.data_parallel_size),
                  spec.engine.get("enable_expert_parallel", e.enable_expert_parallel))
                 for spec in (point.cluster.prefill, point.cluster.decode)]
        label = f"{pools[0][0]}P{pools[1][0]}D"
        for index, short in ((1, "tp"), (2, "pp"), (3, "dp")):
            if any(pool[index] > 1 for pool in pools):
                label += f" {short}={pools[0][index]}/{pools[1][index]}"
        if any(pool[4] for pool in pools):  # EP degree = DP × TP where on, 1 where off
            label += " ep=" + "/".join(str(dp * tp if ep else 1) for _, tp, _, dp, ep in pools)
        parts.append(("cluster", label))
    return parts


# Settings `describe_point` already names (or that never tell points apart).
_LABELLED_KEYS = {"name", "variants", *(f"engine.{k}" for k in (
    "scheduler", "chunk_size", "max_num_batched_tokens", "split_n", "draft", "draft.model", "tensor_parallel_size",
    "pipeline_parallel_size", "replicas", "router", "router_overlap_weight", "policy", "preemption", "data_parallel_size",
    "enable_expert_parallel")), "trace.burstiness",
    *(f"cluster.{p}.{k}" for p in ("prefill", "decode")
      for k in ("replicas", "engine.tensor_parallel_size", "engine.pipeline_parallel_size",
                "engine.data_parallel_size", "engine.enable_expert_parallel"))}


def point_labels(points: list[SweepConfig]) -> list[str]:
    """Labels of the points of one sweep: `describe_point`, plus every setting that differs
    between the points and it does not name, and without its qualifiers (`_QUALIFIER_PARTS`:
    'swap', 'priority') that every point shares. A differing model or device leads the label
    ('llama-2-70b · a100-80gb · sarathi chunk=256'); other keys follow as key=value
    ('sarathi chunk=512 max_num_seqs=64', 'vllm trace.qps=8'; file paths by their name).

    A key differs when two points that have it hold different values, or when some points lack
    it (their trace is of another kind) and a point that has it set it explicitly: a default the
    schema filled in (`trace.arrival=poisson` of a Poisson trace beside a closed loop) is no
    difference. A differing trace kind is named by the kind; a key only some kinds have is named
    only where it differs among the points of that kind ('poisson' beside 'closed_loop
    trace.clients=2' and 'closed_loop trace.clients=4'), one all kinds have wherever it differs. Devices of one name but different figures (two inline
    `h100-sxm` mappings) are told apart by the figures that differ ('device.memory_bandwidth_gb_per_s=2000').
    One point, or points differing only in what describe_point names, keep its label."""
    flat = [_flat_settings(p) for p in points]
    explicit = [_flat_settings(p, explicit_only=True) for p in points]
    keys = sorted({k for f in flat for k in f} - _LABELLED_KEYS)
    differing = [k for k in keys if _differs(k, flat, explicit)]
    kinds = [f.get("trace.kind") for f in flat]
    by_kind: dict[Any, list[str]] = {}
    if "trace.kind" in differing:  # the kind names what only some kinds have; those keys only within a kind
        differing = [k for k in differing if not k.startswith("trace.") or k == "trace.kind"
                     or all(k in f for f in flat)]
        for kind in dict.fromkeys(kinds):
            same = [i for i, k in enumerate(kinds) if k == kind]
            by_kind[kind] = [k for k in keys if k.startswith("trace.") and k != "trace.kind" and k not in differing
                             and _differs(k, [flat[i] for i in same], [explicit[i] for i in same])]
    figures = _device_figures(points, flat)
    parts = [_describe_parts(p) for p in points]
    shared = {part for part in parts[0] if part[0] in _QUALIFIER_PARTS and all(part in q for q in parts)} \
        if len(points) > 1 else set()
    labels = []
    for point_parts, settings, own, trace_kind in zip(parts, flat, figures, kinds):
        lead = [str(settings[k]) for k in ("model", "device") if k in differing]
        kind = [str(settings["trace.kind"])] if "trace.kind" in differing else []
        tail = [f"{k.removeprefix('engine.')}={_short_value(k, settings[k])}" for k in differing + by_kind.get(trace_kind, [])
                if k not in ("model", "device", "trace.kind") and k in settings
                and not (k == "trace.arrival" and settings[k] == "gamma")]  # 'gamma=γ' says it
        head = [text for part in point_parts if part not in shared for _, text in [part]]
        labels.append(" · ".join(lead + [" ".join(head + kind + tail + own)]))
    return labels


def _differs(key: str, flat: list[dict[str, Any]], explicit: list[dict[str, Any]]) -> bool:
    """Whether `key` tells the points apart (`point_labels`)."""
    values = {json.dumps(f[key], default=str, sort_keys=True) for f in flat if key in f}
    if len(values) > 1:
        return True
    return any(key not in f for f in flat) and any(key in e for e in explicit)


_DATASHEET_FIGURES = ("memory_gib", "dense_bf16_tflops", "dense_fp8_tflops", "memory_bandwidth_gb_per_s",
                      "gpu_link.kind", "gpu_link.gb_per_s_per_direction", "host_link_gb_per_s_per_direction")


def _device_figures(points: list[SweepConfig], flat: list[dict[str, Any]]) -> list[list[str]]:
    """Per point, 'device.KEY=VALUE' for the device figures (`DeviceSpec.describe`) that differ
    between points whose devices share a name; empty where the names tell the devices apart."""
    described = [_flatten(get_device_spec(p.device).describe()) for p in points]
    for d in described:
        for key in ("name", "source", "efficiency_source"):
            d.pop(key, None)
    by_name: dict[str, set[str]] = {}
    for settings, d in zip(flat, described):
        by_name.setdefault(str(settings.get("device")), set()).add(json.dumps(d, sort_keys=True, default=str))
    if all(len(specs) == 1 for specs in by_name.values()):
        return [[] for _ in points]
    keys = sorted({k for d in described for k in d})
    differing = [k for k in keys if len({json.dumps(d.get(k), default=str) for d in described}) > 1]
    # The datasheet figures a user writes say it best; else the first few efficiencies that differ.
    differing = [k for k in differing if k in _DATASHEET_FIGURES] or differing[:3]
    return [[f"device.{k}={_short_value(k, d[k])}" for k in differing if k in d] for d in described]


def _flat_settings(point: SweepConfig, explicit_only: bool = False) -> dict[str, Any]:
    """The point's settings as dotted keys; engine keys only where the point reads them: its
    scheduler's (`EngineConfig.used_settings`), acceptance and draft only with split_n (the draft
    proposes nothing without it), no engine.router or overlap weight beside `cluster:` (each
    pool has its own router: `_POINT_ONLY_ENGINE_KEYS`). So a label names no default a point does not read
    ('acceptance=0.7' of a point without drafts because another point set 0.6).
    `explicit_only`: only the keys the config set (not the defaults the schema filled in)."""
    tree = point.model_dump(mode="json", exclude_unset=explicit_only)
    read = set(point.engine.used_settings())
    if not point.engine.split_n:
        read -= {"acceptance", "draft"}
    if point.cluster is not None:
        read -= {"router", "router_overlap_weight"}
    tree["engine"] = point.engine.model_dump(mode="json", include=read, exclude_unset=explicit_only)
    flat: dict[str, Any] = {}

    if "device" in tree:  # a built-in, file or inline device by its `name:` (a file's was once its path)
        tree["device"] = get_device_spec(tree["device"]).name

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
