"""Relative paths in a config: against the config file's folder (in the file) or the working
directory (given with `--set`)."""
from __future__ import annotations

from pathlib import Path

from experiments.config.merging import _get_dotted


# Keys holding file paths: relative paths in a config file are relative to the file's folder;
# those given with --set are relative to the working directory (as a shell user expects).
_PATH_KEYS = ("trace.path", "engine.acceptance.file", "model", "engine.draft.model", "cost_model", "device")


def _resolve_paths(tree: dict, folder: Path) -> None:
    """Make the relative paths under `_PATH_KEYS` absolute against `folder`. `tree` is nested
    (a config) or flat with dotted keys (--set values); `model` is a path only if it looks like one."""
    for dotted in _PATH_KEYS:
        parent, _, leaf = dotted.rpartition(".")
        node = tree if dotted in tree else _get_dotted(tree, parent) if parent else tree
        key = dotted if dotted in tree else leaf
        value = node.get(key) if isinstance(node, dict) else None
        if not isinstance(value, str):
            continue
        if dotted == "cost_model" and value.startswith("measured:"):  # measured:DIR[,DIR...]
            node[key] = "measured:" + ",".join(_absolute(d, folder) for d in value[len("measured:"):].split(","))
            continue
        prefix = "profile:" if dotted == "cost_model" and value.startswith("profile:") else ""
        value = value[len(prefix):]
        if dotted == "cost_model" and not prefix:
            continue  # auto / roofline
        is_path = (not dotted.endswith(("model", "device")) or value.endswith((".json", ".yaml", ".yml"))
                   or "/" in value or prefix)  # a device or model name is no path
        if is_path:
            node[key] = prefix + _absolute(value, folder)


def _absolute(value: str, folder: Path) -> str:
    """`value` as a path: unchanged when absolute (after ~), else under `folder`."""
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else folder / path)
