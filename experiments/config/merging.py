"""Variants and `--set` merged into a point's tree (the package docstring's precedence): dotted
keys, mappings merged key by key except the values that are one setting (`_WHOLE_VALUES`),
scheduler-specific keys dropped where a changed scheduler does not read them, and a trace
restarted where its kind changes."""
from __future__ import annotations

import copy
import itertools
from typing import Any

import yaml

from experiments.config.base import ConfigError
from experiments.config.engine import _SCHEDULER_SPECIFIC, SCHEDULER_KEYS, EngineConfig


def _parse_problem(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc).split(";")[0]  # Python's int-digits message, without its sys.set_int_max_str_digits hint


def _parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """--set strings as flat dotted keys (a mapping value becomes its dotted keys; later wins)."""
    set_keys: dict[str, Any] = {}
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected dotted.key=value, e.g. --set trace.path=conv.csv")
        if any(not part.strip() for part in key.split(".")):  # engine..chunk_size, .qps, trace.
            raise ConfigError(f"--set {item!r}: the key {key!r} is malformed (an empty part between dots); "
                              "write dotted keys such as engine.chunk_size=256")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError(f"--set {item!r}: the value is not valid YAML ({problem}); "
                              "quote text, write lists as [1, 2] and mappings as {k: v}") from None
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"--set {item!r}: cannot read the value: {_parse_problem(exc)}") from None
        set_keys.update(_flatten({key: value}))
    return set_keys


# Mapping values that are one setting, not a block of settings: a variant or --set replaces them
# whole (a length spec switching `dist: zipf` to `dist: normal` must not keep `theta`).
_WHOLE_VALUES = ("device", "trace.prompt_tokens", "trace.output_tokens", "engine.acceptance", "engine.draft")


def _flatten(layer: dict, prefix: str = "") -> dict[str, Any]:
    """A variant or --set layer as dotted keys: {engine: {chunk_size: 256}} -> {engine.chunk_size: 256},
    so nested and dotted forms merge identically. `_WHOLE_VALUES` stay whole; an empty mapping
    (nothing to merge) adds no key."""
    flat: dict[str, Any] = {}
    for key, value in layer.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and dotted not in _WHOLE_VALUES:
            flat.update(_flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def _variants_as_run(base_tree: dict, point_trees: list[dict]) -> list[dict[str, Any]]:
    """Variants that give `point_trees` again from `base_tree` with no --set: each point's dotted
    keys whose value differs from the base's (every trace key where the trace kind differs, since
    a kind change starts the trace afresh), list values wrapped in a list so they are not crossed.
    A key the base has and a point lacks is always one that point's scheduler does not read, so
    its `engine.scheduler` (which differs) drops it again."""
    base_flat = _flatten({k: v for k, v in base_tree.items() if k != "variants"})
    variants = []
    for tree in point_trees:
        flat = _flatten(tree)
        new_kind = flat.get("trace.kind") != base_flat.get("trace.kind")
        variants.append({k: [v] if isinstance(v, list) else v for k, v in flat.items()
                         if k not in base_flat or base_flat[k] != v or (new_kind and k.startswith("trace."))})
    return variants


def _shown(value: Any) -> str:
    """A value as written in YAML flow style: {engine.chunk_size: 256}, [1, 2], vllm."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_shown(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _overlaps(a: str, b: str) -> bool:
    """Whether dotted keys `a` and `b` set the same value (one is the other or inside it)."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _apply_overrides(tree: dict, combo: dict[str, Any], set_keys: dict[str, Any]) -> tuple[list, list[str]]:
    """Apply the --set keys to one point (`tree`, which already holds its variant `combo`), in place.

    Returns (the (set key, variant key) pairs whose value the --set changed, the scheduler-specific
    --set keys left out because this point's scheduler does not read them). With `engine.scheduler`
    among the --set keys every key is applied (and checked) as given.
    """
    touched = [(s, k) for s in set_keys for k in combo if _overlaps(s, k)]
    before = {k: copy.deepcopy(_get_dotted(tree, k)) for _, k in touched}
    old_kind = _get_dotted(tree, "trace.kind")
    for key, value in set_keys.items():
        _set_dotted(tree, key, value, f"--set {key}")
    _drop_unused_scheduler_keys(tree, set_keys)
    _restart_trace_on_kind_change(tree, set_keys, old_kind)
    skipped = []
    engine = tree.get("engine")
    if isinstance(engine, dict) and "engine.scheduler" not in set_keys:
        reads = _keys_read_by(engine.get("scheduler", EngineConfig.model_fields["scheduler"].default))
        for key in set_keys:
            leaf = key.removeprefix("engine.")
            if key.startswith("engine.") and leaf in _SCHEDULER_SPECIFIC and leaf not in reads and key not in combo:
                engine.pop(leaf, None)
                skipped.append(key)
    return [(s, k) for s, k in touched if _get_dotted(tree, k) != before[k]], skipped


def _get_dotted(tree: dict, dotted: str):
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _keys_read_by(scheduler: Any) -> set[str]:
    """The scheduler-specific keys `scheduler` reads; none for a value that is no scheduler's name
    (`{min: 5}`, `[vllm]`: not hashable, it once raised TypeError here; validation names it next)."""
    return SCHEDULER_KEYS.get(scheduler, set()) if isinstance(scheduler, str) else set()


def _drop_unused_scheduler_keys(tree: dict, explicit: dict[str, Any]) -> None:
    """When the scheduler was changed (by a variant or --set), drop the inherited keys that only
    other schedulers read; keys set explicitly alongside the change stay (and are checked)."""
    engine = tree.get("engine")
    if "engine.scheduler" not in explicit or not isinstance(engine, dict):
        return
    used = _keys_read_by(engine.get("scheduler", "sarathi"))
    for key in _SCHEDULER_SPECIFIC - used:
        if f"engine.{key}" not in explicit:
            engine.pop(key, None)


def _restart_trace_on_kind_change(tree: dict, layer: dict[str, Any], old_kind: Any) -> None:
    """When `layer` (a variant combination or the --set keys) changed `trace.kind`, the trace starts
    afresh: only the trace keys the layer set stay. A key can mean different things in two kinds
    (`qps` samples a profile at that rate but time-scales a file), so none is inherited."""
    trace = tree.get("trace")
    if "trace.kind" not in layer or not isinstance(trace, dict) or trace.get("kind") == old_kind:
        return
    for key in list(trace):
        if not any(_overlaps(k, f"trace.{key}") for k in layer):
            del trace[key]


def _cross(variant: dict[str, Any]) -> list[dict[str, Any]]:
    keys = list(variant)
    values = [v if isinstance(v, list) else [v] for v in variant.values()]
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def _apply_variant(raw: dict, combo: dict[str, Any], where: str) -> dict:
    point = copy.deepcopy({k: v for k, v in raw.items() if k != "variants"})
    old_kind = _get_dotted(point, "trace.kind")
    for key, value in combo.items():
        _set_dotted(point, key, value, where)
    _drop_unused_scheduler_keys(point, combo)
    _restart_trace_on_kind_change(point, combo, old_kind)
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
