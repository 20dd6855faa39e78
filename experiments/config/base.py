"""What every block of the config shares: the error and warning types, the bounds of counts, the
strict pydantic base model (`_Strict`: no unknown key, no NaN or inf, no boolean as a number) and
`validation_problems`, pydantic's errors as one line."""
from __future__ import annotations

import re
from typing import Annotated, Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from traces.readers.fields import MAX_TOKENS


class ConfigError(ValueError):
    """A config problem, already phrased for the user (file, key, what is valid)."""


class ConfigWarning(UserWarning):
    """A config that loads but may not do what its author meant (a --set overriding a variant)."""


# Bounds of counts, each far above any real use and below where the number itself does harm:
# a request count sizes arrays of per-request state up front (10 M requests are GBs and hours of
# simulation), a step's token budget above 2**24 exceeds every built-in model's context (131,072
# at most) over a hundredfold, and seeds are the 32-bit numbers numpy's legacy RandomState takes.
# Request lengths share the trace readers' bound (traces.readers.fields.MAX_TOKENS, 2**31 - 1).
_MAX_REQUESTS = 10_000_000
_MAX_STEP_TOKENS = 2**24
_MAX_SEED = 2**32 - 1
_MAX_REPLICAS = 10_000  # one SimPy process and one KV pool each
# KV blocks one GPU's pool may hold, given (`engine.num_gpu_blocks`) or derived from the device's
# memory (`experiments.deployment.build_scheduler_config`), checked before the pool is allocated:
# the simulator's free list and prefix cache cost 40-58 bytes a block (measured: 2 M blocks of
# sarathi / vllm_v1), so 2**25 blocks are ~2 GB a pool; 9.2e18 blocks once grew to 13 GB before being
# killed. The largest real pool is ~2.5 M blocks of 16 tokens (a 288 GB card holding a 0.6 B
# model's FP8 KV at TP 8); vLLM's block table is int32 (vllm/v1/worker/block_table.py).
# `_check_kv_pool_override` also bounds an override by the device's memory.
MAX_KV_BLOCKS = 2**25
_MAX_THINK_TIME_S = 1e6  # 11.6 days; float seconds keep sub-microsecond resolution far beyond it
_Seed = Annotated[int, Field(ge=0, le=_MAX_SEED)]
_Requests = Annotated[int, Field(ge=1, le=_MAX_REQUESTS)]
_Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
_StepTokens = Annotated[int, Field(ge=1, le=_MAX_STEP_TOKENS)]


class _Strict(BaseModel):
    # allow_inf_nan=False: NaN and ±inf are refused for every float field (qps: .nan, slo: .inf).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        # YAML `true` would otherwise pass as the integer 1 (chunk_size: true -> chunk 1).
        # Numbers inside a mapping or list (slo: {tbt_p99_s: true}, search.qps: [1, true]) too.
        if isinstance(data, dict):
            for key, value in data.items():
                field = cls.model_fields.get(key)
                if field is None or "bool" in str(field.annotation):
                    continue
                if isinstance(value, bool):
                    raise ValueError(f"{key}: expected a number or name, got {str(value).lower()}")
                if isinstance(value, (dict, list, tuple)) and _NUMBER_TYPES.search(str(field.annotation)):
                    found = _bool_inside(value)
                    if found is not None:
                        raise ValueError(f"{key}: {found[0] or 'an item'}: expected a number, "
                                         f"got {str(found[1]).lower()}")
        return data


_NUMBER_TYPES = re.compile(r"\b(int|float)\b")


def _bool_inside(value: Any, prefix: str = "") -> tuple[str, bool] | None:
    """('tbt_p99_s', True): the path to the first boolean in a nested mapping or list ('[1]' for
    an item) and that boolean; None when it holds none."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        at = f"{prefix}.{key}" if prefix and isinstance(key, str) else str(key) if isinstance(key, str) \
            else f"{prefix}[{key}]"
        if isinstance(item, bool):
            return at, item
        inner = _bool_inside(item, at)
        if inner is not None:
            return inner
    return None


def validation_problems(exc: ValidationError, keyed: bool = True, root_key: str = "",
                        message: Callable[[dict], str] | None = None) -> str:
    """pydantic's errors in `exc` as one line, "key: message; key: message" (not pydantic's dump):
    each error's dotted `loc` as its key (`keyed` False: the messages alone), `root_key` for an
    error on the whole model (empty loc; "": no key), and `message(error)` as its text (default:
    pydantic's `msg` less its "Value error, " lead). Shared by `layouts_of`, `pool_point` and the
    xPyD search's layouts (`experiments.planning.disaggregation`); a config file's errors name
    lines too (`_validate`)."""
    def text(error: dict) -> str:
        said = message(error) if message is not None else error["msg"].removeprefix("Value error, ")
        key = ".".join(map(str, error["loc"])) or root_key
        return f"{key}: {said}" if keyed and key else said

    return "; ".join(text(error) for error in exc.errors())
