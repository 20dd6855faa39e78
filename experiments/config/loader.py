"""`load_config`: a config file read, its `--set` keys and variants applied (`merging.py`,
`variants.py`), every point validated, and every trace file checked before any point runs."""
from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

from experiments.config.base import ConfigError, ConfigWarning
from experiments.config.merging import _apply_overrides, _parse_overrides, _parse_problem, _variants_as_run
from experiments.config.paths import _resolve_paths
from experiments.config.sweep import SweepConfig
from experiments.config.trace import FileTrace, SessionsTrace
from experiments.config.validate import _line_of, _validate
from experiments.config.variants import _check_layout_keys, _expand, _layouts_of


# ----- loading -------------------------------------------------------------------------------

def load_config(path: str | Path, overrides: list[str] = (),
                on_warning: Callable[[str], None] | None = None) -> tuple[SweepConfig, list[dict[str, Any]]]:
    """Read, override and validate a config file; expand its variants.

    Precedence (the module docstring): the file's base, then each variant, then the `--set`
    keys, applied to every point after its variant. Mappings merge as their dotted keys would.

    Args:
        path: the YAML file.
        overrides: "dotted.key=value" strings (value parsed as YAML).
        on_warning: called with the text of each warning (a --set changing what a variant set, a
            --set some points' scheduler does not read, points that came out identical);
            default `warnings.warn(text, ConfigWarning)`.

    Returns:
        (base config with the --set keys, list of point dicts ready for
        `SweepConfig.model_validate`, one per distinct point, in variant order). With --set keys
        the base's `variants` are the points as run (`_variants_as_run`), so the base dumped and
        loaded again with no --set gives the same points.

    Raises:
        ConfigError: with the file, the key (and its line where known) and what is valid; also a
            --set no point reads, and a file trace whose path is unset or does not exist.
    """
    path = Path(path)
    said: list[str] = []
    raw, root_node = _read_yaml(path)
    folder = path.resolve().parent
    _resolve_paths(raw, folder)
    set_keys = _parse_overrides(overrides)
    _resolve_paths(set_keys, Path.cwd())
    if "variants" in set_keys:  # --set 'variants=[...]' replaces the list the points come from
        raw["variants"] = set_keys.pop("variants")
    base_tree = copy.deepcopy(raw)
    _apply_overrides(base_tree, {}, set_keys)
    _check_layout_keys(base_tree, raw, set_keys, path, root_node)
    base = _validate(base_tree, path, root_node, where="", set_keys=set_keys)
    layouts = _layouts_of(base, path, said.append)
    points = _expand(raw, set_keys, path, root_node, said.append, layouts)
    if set_keys and (raw.get("variants") or base.layouts is not None):  # the base records its points as run
        # (config.yaml loads again: `experiments.planning.sweep.config_as_run` drops the layouts they hold)
        base = base.model_copy(update={"variants": _variants_as_run(base_tree, [_pinned(tree, point, base_tree)
                                                                               for tree, point, _ in points])})
    in_file = isinstance(raw.get("trace"), dict) and "path" in raw["trace"] and "trace.path" not in set_keys
    qps_in_file = isinstance(raw.get("trace"), dict) and "qps" in raw["trace"] and "trace.qps" not in set_keys
    _check_trace_files(points, base, path, _line_of(root_node, ["trace", "path"]) if in_file else None,
                       _line_of(root_node, ["trace", "qps"]) if qps_in_file else None, "trace.qps" in set_keys)
    for text in said:  # only for a config that loads
        if on_warning is None:
            warnings.warn(text, ConfigWarning, stacklevel=2)  # at the caller's line
        else:
            on_warning(text)
    return base, [tree for tree, _, _ in points]


def _pinned(tree: dict, point: SweepConfig, base_tree: dict) -> dict:
    """`tree` for `_variants_as_run`: a vllm_v1 point that left unset an engine key vLLM defaults
    per card, which the base sets (a variant's scheduler dropped it, a --set scheduler made it
    vllm_v1), gets the value it ran with, since a variant cannot unset a key of the base."""
    from experiments.vllm_defaults import DEFAULTED_KEYS

    engine, base_engine = tree.get("engine") or {}, base_tree.get("engine") or {}
    missing = [k for k in DEFAULTED_KEYS if k not in engine and k in base_engine]
    if point.engine.scheduler != "vllm_v1" or not missing:
        return tree
    return {**tree, "engine": {**engine, **{k: getattr(point.engine, k) for k in missing}}}


def _read_yaml(path: Path):
    """(the file's mapping, its YAML node tree for line numbers); ConfigError if unreadable."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text (UTF-8) YAML file") from None
    try:
        raw = yaml.safe_load(text) or {}
        root_node = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    except (ValueError, RecursionError) as exc:  # a 4,300-digit integer; nesting deeper than the stack
        raise ConfigError(f"{path}: cannot read the YAML: {_parse_problem(exc)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys (name, model, trace, engine, ...)")
    return raw, root_node


def _check_trace_files(points: list[tuple[dict, SweepConfig, str]], base: SweepConfig, path: Path,
                       line: int | None, qps_line: int | None = None, qps_set: bool = False) -> None:
    """ConfigError unless every point's trace file (kinds with a `path`) is set and is a file:
    caught when the config loads, not when the point runs. A variant is named only where its
    trace differs from the base's; `line` is that of the file's trace.path (None: not in the file)."""
    checked: dict[str, None] = {}  # the file traces already read by `_check_scalable`
    for _, config, where in points:
        if not hasattr(config.trace, "path") or (isinstance(config.trace, SessionsTrace) and config.trace.path is None):
            continue  # generated sessions have no file
        variant = f"{where}: " if where != "the base" and config.trace != base.trace else ""
        at = f"{path}: {variant}trace.path{f' (line {line})' if line and not variant else ''}"
        if config.trace.path is None:
            raise ConfigError(f"{at}: not set: give it in the config or with --set trace.path=FILE")
        resolved = Path(config.trace.path).expanduser()
        if not resolved.is_file():
            problem = ("is a folder, not a trace file" if resolved.is_dir() else "no such file" if not resolved.exists()
                       else "not a regular file (a FIFO, device or socket is not read: it could wait or run forever)")
            raise ConfigError(f"{at}: {problem}: {resolved}")
        if isinstance(config.trace, FileTrace) and (config.trace.qps is not None or config.search is not None):
            key = "search.qps" if config.trace.qps is None else "--set trace.qps" if qps_set else "trace.qps"
            line = qps_line if key == "trace.qps" and not variant else None
            _check_scalable(config, f"{path}: {variant}{key}{f' (line {line})' if line else ''}", checked)


def _check_scalable(config: SweepConfig, at: str, checked: dict[str, None]) -> None:
    """ConfigError unless a file trace that `trace.qps` (or a capacity search) time-scales has
    a mean rate to scale: at least two requests, not all at one instant, after its filters,
    window and max_requests (`traces.replay.scale_to_qps`). The file is read here, once per
    distinct trace of the config; a file that cannot be read is left to the point, whose error
    names its rows."""
    trace = config.trace
    if config.search is not None and trace.qps is None:  # a search's trials read search.num_requests
        trace = trace.model_copy(update={"max_requests": config.search.num_requests})
    key = trace.model_dump_json()
    if key in checked:
        return
    checked[key] = None
    try:
        requests, _ = trace.unscaled()
    except (ValueError, OSError):
        return
    arrivals_s = np.array([r.arrival_s for r in requests], dtype=float)
    if len(arrivals_s) >= 2 and arrivals_s.max() > arrivals_s.min():
        return
    held = f"{len(arrivals_s)} valid request{'' if len(arrivals_s) == 1 else 's'}" + (
        " all at one instant" if len(arrivals_s) > 1 else "")
    raise ConfigError(f"{at}: cannot time-scale the trace file {trace.path} to a QPS: it holds {held} (after its "
                      "filters, window_s and max_requests), so its mean rate is undefined; give a file with at "
                      "least two requests at different times, or drop the qps to replay it at its own times")
