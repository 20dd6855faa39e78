"""The config reference page, generated from the pydantic models of `experiments/config/`.

    python -m experiments.config_reference > docs/config.md

Every key of every block: its type, default and bounds as the models validate them, and the
comment written beside it in its model's file (the why of a key lives there, once). The committed page
is checked against this output by tests/test_config_reference.py, so it cannot drift from the
code: after changing a file of experiments/config/, run the command above.
"""
from __future__ import annotations

import inspect
import io
import re
import sys
import tokenize
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from experiments import config as cfg

# The blocks of a config, in page order: (heading, model, the key path its keys are written
# under). Trace kinds come from the `TraceConfig` union and nested models (length clips, draft
# model, ...) from the fields' types (`sections`), so a new one is documented without a change here.
TOP_SECTIONS: tuple[tuple[str, type[BaseModel], str], ...] = (
    ("Top level", cfg.SweepConfig, ""),
    ("engine", cfg.EngineConfig, "engine."),
    ("search", cfg.SearchConfig, "search."),
    ("fleet", cfg.FleetConfig, "fleet."),
)
_CONSTRAINTS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))


def render() -> str:
    """The whole reference page (Markdown)."""
    out = ["# Config reference", "",
           "Generated from the pydantic models in `experiments/config/` by "
           "`python -m experiments.config_reference > docs/config.md`; do not edit by hand. "
           "How configs work (variants, `--set`, precedence, relative paths) is in [configs.md](configs.md) and "
           "the docstring of `experiments/config/__init__.py`; examples are in `experiments/configs/`.", ""]
    for title, model, prefix in sections():
        out += _section(title, model, prefix)
    out += _slo_section()
    out += _scheduler_keys_section()
    return "\n".join(out).rstrip() + "\n"


def sections() -> list[tuple[str, type[BaseModel], str]]:
    """Every model a config can hold: the top level, each trace kind, engine, search, fleet, then
    the models nested in their fields (each under the first key that holds it)."""
    trace_models = typing.get_args(typing.get_args(cfg.TraceConfig)[0])
    found = [TOP_SECTIONS[0]]
    for model in trace_models:
        kinds = typing.get_args(model.model_fields["kind"].annotation)
        found.append((f"trace: kind {' / '.join(kinds)}", model, "trace."))
    found += TOP_SECTIONS[1:]
    seen = {model for _, model, _ in found}
    for _, model, prefix in found:  # grows while it is walked: nested models of nested models too
        for name, field in model.model_fields.items():
            for nested in _models_in(field.annotation):
                if nested not in seen:
                    seen.add(nested)
                    found.append((f"{nested.__name__} (in `{prefix}{name}`)", nested, f"{prefix}{name}."))
    return found


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _section(title: str, model: type[BaseModel], prefix: str) -> list[str]:
    doc = inspect.cleandoc(model.__doc__ or "").replace("\n", " ")
    lines = [f"## {title}", "", doc, "", "| key | type | default | notes |", "|---|---|---|---|"]
    comments = field_comments(model)
    for name, field in model.model_fields.items():
        required = field.is_required()
        default = "required" if required else _default_text(field)
        notes = "; ".join(x for x in (_bounds(field), comments.get(name, "")) if x)
        lines.append(f"| `{prefix}{name}` | {_cell(type_text(field.annotation))} | {_cell(default)} | {_cell(notes)} |")
    return lines + [""]


def _slo_section() -> list[str]:
    metrics = ", ".join(f"`{m[:-2]}`" for m in cfg.LATENCY_METRICS)
    percentiles = ", ".join(f"{p:g}" for p in cfg.PERCENTILES)
    return ["## slo and goodput", "",
            "`slo:` maps `<metric>_p<percentile>_s` to a limit in seconds (> 0), e.g. `tbt_p99_s: 0.1`; "
            f"metric in {metrics}; percentile in {percentiles}. A point meets its SLOs when every percentile, "
            "over the whole run, is at or below its limit (an undefined metric fails).", "",
            "`goodput:` maps a per-request metric (`ttft_s`, `tpot_s`, `e2e_s`) to a limit in seconds: goodput is "
            "the completed requests per second meeting every limit (`vllm bench serve --goodput`).", ""]


def _scheduler_keys_section() -> list[str]:
    lines = ["## Keys only some schedulers read", "",
             "Setting one of these for a scheduler that does not read it is an error; a variant that changes "
             "`engine.scheduler` drops the inherited ones the new scheduler does not read.", "",
             "| scheduler | reads |", "|---|---|"]
    for name in sorted(cfg.SCHEDULER_KEYS):
        lines.append(f"| `{name}` | {', '.join(f'`engine.{k}`' for k in sorted(cfg.SCHEDULER_KEYS[name]))} |")
    return lines + [""]


def field_comments(model: type[BaseModel]) -> dict[str, str]:
    """{field: the `# comment` on its line in the body of the class, or of the base that declares it}."""
    comments: dict[str, str] = {}
    for klass in reversed(model.__mro__):
        if inspect.isclass(klass) and issubclass(klass, BaseModel) and klass is not BaseModel:
            comments.update(_own_comments(klass, model.model_fields))
    return comments


def _own_comments(klass: type, fields: dict) -> dict[str, str]:
    try:
        source = inspect.getsource(klass)
    except (OSError, TypeError):
        return {}
    comments: dict[str, str] = {}
    pending: str | None = None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NEWLINE or tok.type == tokenize.NL:
            pending = None
        elif tok.type == tokenize.NAME and tok.start[1] == 4 and pending is None:
            pending = tok.string if tok.string in fields else ""
        elif tok.type == tokenize.COMMENT and pending:
            comments[pending] = tok.string.lstrip("#").strip()
    return comments


def type_text(annotation: Any) -> str:
    """A readable type: 'int | null', 'poisson | gamma | constant', 'list of float', 'mapping'."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is type(None):
        return "null"
    if origin is typing.Annotated:
        return type_text(args[0]) + _bounds_of(args[1:])
    if origin is typing.Literal:
        return " \\| ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(type_text(a) for a in args)
    if origin is list:
        return f"list of {type_text(args[0])}"
    if origin is tuple:
        return "[" + ", ".join(type_text(a) for a in args) + "]"
    if origin is dict:
        return "mapping"
    if annotation is typing.Any:
        return "any"
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return annotation.__name__
    return getattr(annotation, "__name__", str(annotation))


def _bounds_of(metadata) -> str:
    parts = []
    for item in metadata:
        inner = item.metadata if isinstance(item, FieldInfo) else [item]
        for m in inner:
            for attr, sign in _CONSTRAINTS:
                if getattr(m, attr, None) is not None:
                    parts.append(f"{sign} {_number(getattr(m, attr))}")
    return f" ({', '.join(parts)})" if parts else ""


def _number(value: float) -> str:
    """Exactly: integers in full (4294967295, not 4.29e+09), other numbers as Python writes them."""
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(float(value))


def _bounds(field: FieldInfo) -> str:
    return _bounds_of([field]).strip(" ()")


def _default_text(field: FieldInfo) -> str:
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        dumped = value.model_dump(mode="json")
        return "{}" if not dumped else f"{type(value).__name__} defaults"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_number(v) if isinstance(v, float) else str(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return "{}" if not value else str(value)
    return str(value)


def _cell(text: str) -> str:
    return re.sub(r"(?<!\\)\|", r"\\|", text).replace("\n", " ")


if __name__ == "__main__":  # pragma: no cover - the command writes the page
    sys.stdout.write(render())
