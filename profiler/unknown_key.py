"""The message for an unknown key in a validated YAML mapping: the valid keys of the block that holds
it, and the closest one where the key looks like a typo of it. One formatter for the device files
(`profiler.device_file`) and the sweep config (`experiments.config`), so every block says the same.
"""
from __future__ import annotations

import difflib
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel

# Parts of a pydantic error location that name no field: a validator's wrapper or a union's branch.
_NOT_A_FIELD = ("function-", "literal[", "tagged-union[")


def unknown_key_message(model: type[BaseModel], loc: tuple, not_here: tuple[str, ...] = ()) -> str:
    """'unknown key; valid keys: a, b, c', with ' (did you mean b?)' after 'unknown key' where one
    valid key starts with the unknown one (`gemm`: gemm_flops) or else difflib finds a close one
    (its default cutoff, 0.6 of matching characters: `chunk_sise`: chunk_size); plain 'unknown
    key' where the holding block cannot be told.

    Args:
        model: the top model validated (e.g. `DeviceFile`, `SweepConfig`).
        loc: the `extra_forbidden` error's location, its last part the unknown key.
        not_here: keys of the block's model not valid in this use of it (a cluster pool's
            `engine:` takes no replicas or router), left out of the list.
    """
    valid = [k for k in valid_keys(model, loc) if k not in not_here]
    if not valid:
        return "unknown key"
    key = str(loc[-1])
    longer = [k for k in valid if k.startswith(key)]
    close = longer if len(longer) == 1 else difflib.get_close_matches(key, valid, n=1)
    guess = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown key{guess}; valid keys: {', '.join(valid)}"


def valid_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """The field names of the model that holds the key at `loc` (a pydantic error location), e.g.
    EngineConfig's for ('engine', 'chunk_sise'), SyntheticTrace's for ('trace', 'synthetic',
    'arival') (a tagged union's branch is named by its tag), Efficiency's for ('efficiency',
    '<union tag>', 'gemm'); [] where it cannot be told (a mapping keyed by text, an untagged union
    of several models)."""
    candidates: list[type[BaseModel]] = [model]
    for part in loc[:-1]:
        if not isinstance(part, str) or part.startswith(_NOT_A_FIELD):
            continue  # a dict key (an all_reduce TP degree) or a union branch's wrapper
        tagged = [m for m in candidates if _has_tag(m, part)] if len(candidates) > 1 else []
        if tagged:
            candidates = tagged
            continue
        field = candidates[0].model_fields.get(part) if len(candidates) == 1 else None
        candidates = _models_in(field.annotation) if field is not None else []
        if not candidates:
            return []
    return list(candidates[0].model_fields) if len(candidates) == 1 else []


def _has_tag(model: type[BaseModel], tag: str) -> bool:
    """Whether a field of `model` is a Literal that admits `tag` (a discriminated union's branch)."""
    return any(get_origin(f.annotation) is Literal and tag in get_args(f.annotation)
               for f in model.model_fields.values())


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models inside a field's annotation (`GemmTerms | None`, `dict[int, AllReduceTerms]`,
    `Annotated[Union[SyntheticTrace, ...], Field(discriminator=...)]`), in order, each once."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in get_args(annotation):
        found += [m for m in _models_in(arg) if m not in found]
    return found
