"""A point's tree validated as a `SweepConfig`, each error named by file, key (or `--set KEY`)
and line; the YAML line lookups it uses."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable

import yaml
from pydantic import ValidationError

from experiments.config.base import ConfigError
from experiments.config.sweep import SweepConfig
from experiments.config.trace import TRACE_KINDS
from profiler.unknown_key import unknown_key_message


def _validate(raw: dict, path: Path, root_node, where: str, line: int | None = None,
              set_keys: dict[str, Any] | None = None, line_keys: Iterable[str] | None = None) -> SweepConfig:
    """The validated config, or ConfigError naming each bad key with its line in the file, or
    `--set KEY` (no line) where the value came from the command line. `line` (a variant's) is
    the line of a key in `line_keys` (the dotted keys the variant sets; None: of every key); a
    key the variant does not set is named at its own line in the file (the base's)."""
    try:
        return SweepConfig.model_validate(raw)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = [str(p) for p in err["loc"] if not str(p).startswith(("function-", "tagged-union["))]
            if len(loc) > 1 and loc[0] == "trace" and loc[1] in TRACE_KINDS:  # trace.poisson.qps: trace.qps
                del loc[1]  # only the kind's own level: trace.stages.stages.0.rate is trace.stages.0.rate
            key = ".".join(loc)
            message = err["msg"].replace("Value error, ", "")  # also inside a message that quotes another
            lead = re.match(r"([a-z_]+(?:\.[a-z_]+)*)(?:: | \()", message)
            sentence = re.match(r"([a-z_]+(?:\.[a-z_]+)+) ", message)  # "engine.num_gpus is 3 but ..."
            if not key and lead:  # a check across keys (SweepConfig._deployment_fits) leads with the key
                key, loc = lead[1], lead[1].split(".")
                message = message.removeprefix(f"{key}: ")
            elif not key and sentence:  # ... or is a sentence about it: the line is that key's (or its parent's)
                key, loc = sentence[1], sentence[1].split(".")
            key, loc, message = _set_key_named(key, loc, message, set_keys or {})
            own_line = line if line_keys is None or _overlapping(key, line_keys) else None
            at_line = own_line or _line_of(root_node, loc) or line
            at = f" (line {at_line})" if at_line else ""
            below = [k for k in set_keys or () if key and k.startswith(key + ".")]
            if key and any(key == k or key.startswith(k + ".") for k in set_keys or ()):  # the value --set gave
                key, at = f"--set {key}", ""
            elif below:  # a mapping of the file that --set changed a key of
                at = f" ({at.strip(' ()') + ', ' if at else ''}changed by --set {', '.join(below)})"
            if err["type"] == "extra_forbidden":
                message = unknown_key_message(SweepConfig, err["loc"])
            elif not isinstance(err.get("input"), (dict, list)) and "input" in err and ", got " not in message:
                message += f" (got {err['input']!r})"
            lines.append(f"{path}: {where}{key or '<root>'}{at}: {message}")
        raise ConfigError("\n".join(lines)) from None


def _overlapping(key: str, keys: Iterable[str]) -> bool:
    """Whether dotted `key` is one of `keys`, inside one, or holds one (engine / engine.chunk_size)."""
    return bool(key) and any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in keys)


def _set_key_named(key: str, loc: list[str], message: str, set_keys: dict[str, Any]) -> tuple[str, list[str], str]:
    """(key, loc, message) of an error on a mapping whose message leads with a key inside it
    ("cluster.prefill.engine" + "chunk_size: ..."): that inner key when --set gave it, so the
    error names `--set cluster.prefill.engine.chunk_size`, not the mapping's line in the file; the
    mapping's own name repeated at the message's head ("engine: ...") is dropped."""
    if not key:
        return key, loc, message
    message = message.removeprefix(f"{loc[-1]}: ") if loc else message
    inner = re.match(r"([a-z_]+(?:\.[a-z_]+)*): ", message)
    nested = f"{key}.{inner[1]}" if inner else None
    if nested and any(nested == k or nested.startswith(k + ".") for k in set_keys):
        return nested, nested.split("."), message.removeprefix(f"{inner[1]}: ")
    return key, loc, message


def _variant_line(root_node, index: int) -> int | None:
    """1-based line of variants[index] in the YAML file (None when variants came from --set)."""
    if not isinstance(root_node, yaml.MappingNode):
        return None
    for key_node, value_node in root_node.value:
        if key_node.value == "variants" and isinstance(value_node, yaml.SequenceNode) \
                and index < len(value_node.value):
            return value_node.value[index].start_mark.line + 1
    return None


def _line_of(node, loc: list[str]) -> int | None:
    """1-based line of a key path in the YAML node tree, or None (e.g. a key set by --set)."""
    line = None
    for part in loc:
        if not isinstance(node, yaml.MappingNode):
            break
        for key_node, value_node in node.value:
            if key_node.value == part:
                line, node = key_node.start_mark.line + 1, value_node
                break
        else:
            break
    return line
