"""A config expanded into its points: each variant's combinations (lists crossed) on the base,
each crossed with the layouts of `layouts:`, then the `--set` keys; the warnings about what a
`--set` overrode or does not apply to, and identical points kept once."""
from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any, Callable

from pydantic import ValidationError

from experiments.config.base import ConfigError, validation_problems
from experiments.config.engine import SCHEDULER_KEYS
from experiments.config.labels import describe_point
from experiments.config.merging import _apply_overrides, _apply_variant, _cross, _flatten, _shown
from experiments.config.paths import _resolve_paths
from experiments.config.sweep import SweepConfig
from experiments.config.validate import _line_of, _validate, _variant_line
from profiler import get_model_spec


def _check_layout_keys(base_tree: dict, raw: dict, set_keys: dict[str, Any], path: Path, root_node) -> None:
    """Before the base is validated (whose own checks of these keys, engine.num_gpus against
    DP × TP × PP, would not say that layouts: sets them).

    Raises:
        ConfigError: beside `layouts:`, an engine key a layout sets (`LAYOUT_KEYS`) also set by
            the base, a variant or a --set, naming where.
    """
    layouts = base_tree.get("layouts")
    if not isinstance(layouts, dict):
        return  # none, or not a mapping (said by _validate)
    from experiments.planning.layouts import LAYOUT_KEYS

    gpus = layouts.get("gpus")
    gpus = f" ({gpus} GPUs)" if isinstance(gpus, int) and not isinstance(gpus, bool) else ""
    owned = {f"engine.{key}" for key in LAYOUT_KEYS}
    engine = raw.get("engine") if isinstance(raw.get("engine"), dict) else {}
    clashes = [(f"engine.{k}", _line_of(root_node, ["engine", k])) for k in engine if f"engine.{k}" in owned]
    for index, variant in enumerate(raw.get("variants") or []):
        if isinstance(variant, dict):
            clashes += [(f"variants[{index}] {k}", _variant_line(root_node, index))
                        for k in _flatten(variant) if k in owned]
    clashes += [(f"--set {k}", None) for k in set_keys if k in owned]
    if clashes:
        key, line = clashes[0]
        raise ConfigError(f"{path}: {key}{f' (line {line})' if line else ''}: layouts: sets "
                          f"{', '.join(sorted(owned))} of every point{gpus}; drop it here, "
                          "or drop layouts: and list the layouts as variants")


def _layouts_of(base: SweepConfig, path: Path, warn: Callable[[str], None]) -> list:
    """The layouts `layouts:` crosses every point with (`experiments.planning.layouts`), as
    dotted engine keys; [{}] without it (the points as the variants give them). Warns naming
    each layout skipped and why (the reports list them too: `planning.report_header.layout_lines`).
    The engine keys a layout sets were checked unset (`_check_layout_keys`).
    """
    if base.layouts is None:
        return [{}]
    try:
        valid, skipped = layouts_of(base)
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if skipped:
        warn(f"layouts: {len(skipped)} of the {len(valid) + len(skipped)} layouts of {base.layouts.gpus} GPUs are "
             f"skipped: " + "; ".join(f"{layout.text()} ({why})" for layout, why in skipped))
    return [layout.engine_keys() for layout in valid]


def layouts_of(base: SweepConfig) -> tuple[list, list[tuple[Any, str]]]:
    """(the layouts `base.layouts` runs, the skipped ones with why): those of
    `experiments.planning.layouts.enumerate_layouts` that the model can take, less those the base's
    other settings rule out (a DP group with `preemption: swap` or a draft model is not modelled),
    each with the check's message.

    Raises:
        ValueError: `base.layouts` unset, or no layout left (naming `layouts.gpus` and why each went).
    """
    from experiments.planning.layouts import enumerate_layouts

    valid, skipped = enumerate_layouts(get_model_spec(base.model), base.layouts.gpus, base.layouts.replicas)
    tree = base.model_dump(exclude_unset=True)
    tree.pop("variants", None)
    tree.pop("layouts", None)
    kept = []
    for layout in valid:
        point = copy.deepcopy(tree)
        point["engine"] = {**point.get("engine", {}),
                           **{key.removeprefix("engine."): value for key, value in layout.engine_keys().items()}}
        try:
            SweepConfig.model_validate(point)
        except ValidationError as exc:
            skipped.append((layout, validation_problems(exc, keyed=False)))
        else:
            kept.append(layout)
    if not kept:
        raise ValueError(f"layouts.gpus: none of the {len(skipped)} layouts of {base.layouts.gpus} GPUs can run this "
                         "point: " + "; ".join(f"{layout.text()}: {why}" for layout, why in skipped))
    return kept, skipped


def _expand(raw: dict, set_keys: dict[str, Any], path: Path, root_node,
            warn: Callable[[str], None], layouts: list[dict[str, Any]] = ({},)) -> list[tuple[dict, SweepConfig, str]]:
    """The points (tree, validated config, which variant): each variant's combinations on the base,
    each crossed with the `layouts` (engine keys, `_layouts_of`), then the --set keys. Warns about
    variants a --set overrode, points a --set does not apply to, and identical points (kept once);
    ConfigError for a --set that applies to no point."""
    variants = raw.get("variants") or [{}]
    overridden: dict[str, dict[str, list]] = {}  # set key -> {"variants[i] (key)": [values]}
    not_applied: dict[str, list[str]] = {key: [] for key in set_keys}
    points: list[tuple[dict, SweepConfig, str]] = []
    same: dict[str, list[str]] = {}  # a point's settings -> the labels of the points that have them
    for index, variant in enumerate(variants):
        if not isinstance(variant, dict):
            raise ConfigError(f"{path}: variants[{index}] must be a mapping of dotted keys, got {variant!r}")
        layer = _flatten(variant)
        empty = [k for k, v in layer.items() if v == []]
        if empty:
            raise ConfigError(f"{path}: variants[{index}] {empty[0]}: an empty list gives no points; "
                              "list at least one value")
        line = _variant_line(root_node, index)
        for combo, layout in itertools.product(_cross(layer), layouts):
            where = f"variants[{index}] {_shown(combo)}" if raw.get("variants") else "the base"
            if layout:
                where += f" layout {_shown(layout)}"
            tree = _apply_variant(raw, {**combo, **layout}, f"{path}: variants[{index}]")
            changed, skipped = _apply_overrides(tree, combo, set_keys)
            tree.pop("layouts", None)  # expanded: each point is one layout
            _resolve_paths(tree, path.resolve().parent)
            config = _validate(tree, path, root_node, where=f"{where}: " if raw.get("variants") or layout else "",
                               line=line, set_keys=set_keys, line_keys=list(combo))
            label = f"{where} ({describe_point(config)})"
            for set_key, variant_key in changed:
                values = overridden.setdefault(set_key, {}).setdefault(f"variants[{index}] ({variant_key}", [])
                if combo[variant_key] not in values:
                    values.append(combo[variant_key])
            for set_key in skipped:
                not_applied[set_key].append(label)
            labels = same.setdefault(_settings_of(config), [])
            labels.append(where)
            if len(labels) == 1:
                points.append((tree, config, where))
    _warn_overridden(overridden, set_keys, warn)
    _warn_not_applied(not_applied, set_keys, sum(len(labels) for labels in same.values()), warn)
    for _, config, where in points:
        labels = same[_settings_of(config)]
        if len(labels) > 1:
            warn(f"{len(labels)} points are the same{' once the --set keys are applied' if set_keys else ''} "
                 f"({describe_point(config)}): {', '.join(labels)}; it runs once, as {where}")
    return points


def _settings_of(point: SweepConfig) -> str:
    """A point's settings as validated (defaults filled in: a key left out and its default are
    the same point), as one comparable string."""
    return json.dumps(point.model_dump(mode="json"), sort_keys=True)


def _warn_overridden(overridden: dict[str, dict[str, list]], set_keys: dict[str, Any],
                     warn: Callable[[str], None]) -> None:
    """One warning per --set key that changed values variants set, naming each variant and value."""
    for set_key, variant_values in overridden.items():
        targets = " and ".join(f"{variant}: {', '.join(_shown(v) for v in values)})"
                               for variant, values in variant_values.items())
        warn(f"--set {set_key}={_shown(set_keys[set_key])} overrides {targets}: "
             "a --set applies to every point, after its variant")


def _warn_not_applied(not_applied: dict[str, list[str]], set_keys: dict[str, Any], num_points: int,
                      warn: Callable[[str], None]) -> None:
    """A warning per scheduler-specific --set some points do not read; ConfigError if none reads it."""
    for set_key, labels in not_applied.items():
        leaf = set_key.removeprefix("engine.")
        readers = ", ".join(s for s, keys in SCHEDULER_KEYS.items() if leaf in keys)
        if labels and len(labels) == num_points:
            raise ConfigError(f"--set {set_key}: no point's scheduler reads {leaf} (it is read by {readers}); "
                              "set engine.scheduler too, or leave it out")
        if labels:
            warn(f"--set {set_key}={_shown(set_keys[set_key])} does not apply to {' and '.join(labels)}: "
                 f"only {readers} read {leaf}")
