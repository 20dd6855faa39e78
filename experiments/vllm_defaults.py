"""What `vllm serve` (vLLM 0.19, the V1 engine) picks for the engine flags a user leaves unset,
on a given card: the defaults the simulator applies to an unset `engine:` key of a `vllm_v1` point.

Read from vLLM's source (vllm-project/vllm, the snapshot stored for this project, commit
99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b of `vllm/engine/arg_utils.py`):

- Token budget and sequence cap: `EngineArgs.get_batch_defaults(world_size)`. On a card whose
  total memory (`current_platform.get_device_total_memory()`, cudaMemGetInfo's total) is at least
  70 GiB and whose name does not contain "a100" (PR #17885: a large budget lowered A100
  throughput), the OPENAI_API_SERVER context gets max_num_batched_tokens 8,192 and max_num_seqs
  1,024; every other GPU 2,048 and 256 ("TODO(woosuk): Tune the default values for other
  hardware"). `_set_default_max_num_seqs_and_batched_tokens_args` then clamps an unset budget to
  max_num_seqs × max_model_len (chunked prefill is on in V1, so it is never raised to
  max_model_len) and an unset max_num_seqs to the budget.
- Block size 16 (`CacheConfig.block_size` left None is set to 16 for CUDA attention backends by
  the platform's `check_and_update_config`) and prefix caching on
  (`_set_default_chunked_prefill_and_prefix_caching_args`: `model_config.is_prefix_caching_supported`
  for a decoder-only generation model): the simulator's own defaults already, listed here so a
  report can say which defaults a point ran with.
- CUDA graph capture sizes (`VllmConfig._set_cudagraph_sizes`, `vllm/config/vllm.py`):
  `profiler.cuda_graphs.cudagraph_capture_sizes` (cited there), which the measured cost model pads
  steps to.

The simulator runs the OpenAI API server context, as `vllm serve` does.
"""
from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from profiler.cuda_graphs import cudagraph_capture_sizes  # noqa: F401 (vLLM's capture-size rule, re-exported)
from profiler.device_spec import DeviceSpec

# `EngineArgs.get_batch_defaults`: the card class boundary and its OPENAI_API_SERVER values.
LARGE_CARD_MIN_GIB = 70
LARGE_CARD_BUDGET_TOKENS, LARGE_CARD_MAX_NUM_SEQS = 8192, 1024
OTHER_CARD_BUDGET_TOKENS, OTHER_CARD_MAX_NUM_SEQS = 2048, 256
BLOCK_SIZE_TOKENS = 16

SOURCE = "vLLM 0.19 EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py), OPENAI_API_SERVER context"


@dataclass(frozen=True)
class VllmDefaults:
    """vLLM's defaults for one card and model context.

    Attributes:
        max_num_batched_tokens: the token budget per step (the simulator's `chunk_size`).
        max_num_seqs: most requests running at once.
        block_size: tokens per KV block.
        enable_prefix_caching: automatic prefix caching.
        cudagraph_capture_sizes: the decode batch sizes vLLM captures CUDA graphs for, ascending.
        card_class: why these values: "≥ 70 GiB, not A100" or the other class, with the card.
    """

    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    enable_prefix_caching: bool
    cudagraph_capture_sizes: tuple[int, ...]
    card_class: str


def is_large_card(device: DeviceSpec) -> bool:
    """vLLM's test for the large defaults: total memory ≥ 70 GiB and no "a100" in the name.

    The total is the card's cudaMemGetInfo total (`cuda_total_memory_gib`, else `memory_gib`); the
    name is the built-in card's (`DeviceSpec.card`) and the device's description (vLLM reads the
    CUDA device name, e.g. "NVIDIA A100-SXM4-80GB").
    """
    total = device.cuda_total_memory_gib if device.cuda_total_memory_gib is not None else device.memory_gib
    names = f"{device.card} {device.name}".lower()
    return total >= LARGE_CARD_MIN_GIB and "a100" not in names


def vllm_defaults(device: DeviceSpec, max_model_len: int, max_num_batched_tokens: int | None = None,
                  max_num_seqs: int | None = None, num_speculative_tokens: int = 0) -> VllmDefaults:
    """vLLM 0.19's values on `device` for the keys given as None, the given ones kept.

    Args:
        device: the card (its CUDA-visible total and name decide the class).
        max_model_len: the context limit (an unset budget is clamped to max_num_seqs × it).
        max_num_batched_tokens, max_num_seqs: what the user set, or None for vLLM's default.
        num_speculative_tokens: drafts per step (widens the captured decode batches).

    Returns:
        The resolved values (`VllmDefaults`).
    """
    large = is_large_card(device)
    budget_default, seqs_default = ((LARGE_CARD_BUDGET_TOKENS, LARGE_CARD_MAX_NUM_SEQS) if large
                                    else (OTHER_CARD_BUDGET_TOKENS, OTHER_CARD_MAX_NUM_SEQS))
    seqs = seqs_default if max_num_seqs is None else max_num_seqs
    budget = max_num_batched_tokens
    if budget is None:
        budget = min(seqs * max_model_len, budget_default)
    if max_num_seqs is None:
        seqs = min(seqs, budget)
    total = device.cuda_total_memory_gib if device.cuda_total_memory_gib is not None else device.memory_gib
    card_class = (f"{device.name}: {total:g} GiB >= {LARGE_CARD_MIN_GIB} GiB, not an A100" if large else
                  f"{device.name}: " + ("an A100" if total >= LARGE_CARD_MIN_GIB else
                                        f"{total:g} GiB < {LARGE_CARD_MIN_GIB} GiB"))
    return VllmDefaults(max_num_batched_tokens=budget, max_num_seqs=seqs, block_size=BLOCK_SIZE_TOKENS,
                        enable_prefix_caching=True,
                        cudagraph_capture_sizes=cudagraph_capture_sizes(seqs, budget, num_speculative_tokens),
                        card_class=card_class)


# The engine keys vLLM's defaults fill for an unset vllm_v1 key, and vLLM's name of each.
DEFAULTED_KEYS = {"chunk_size": "max_num_batched_tokens", "max_num_seqs": "max_num_seqs"}


def with_vllm_defaults(engine, device: DeviceSpec, model_max_len: int):
    """`engine` (an `experiments.config.EngineConfig`) with vLLM's defaults on `device` for its
    unset `DEFAULTED_KEYS` when its scheduler is vllm_v1; any other engine unchanged.

    The filled keys stay "unset" (`model_fields_set` is kept), so `applied_defaults` can list
    them, labels name only what the user wrote, and a cluster pool resolves them again for its
    own device.

    Raises:
        ValueError: the resolved engine is invalid (as `EngineConfig`, e.g. a max_num_seqs the
            user set above vLLM's default budget), naming the key.
    """
    if engine.scheduler != "vllm_v1":
        return engine
    unset = [key for key in DEFAULTED_KEYS if key not in engine.model_fields_set]
    if not unset:
        return engine
    d = vllm_defaults(device, engine.max_model_len or model_max_len,
                      None if "chunk_size" in unset else engine.chunk_size,
                      None if "max_num_seqs" in unset else engine.max_num_seqs, engine.split_n)
    resolved = {"chunk_size": d.max_num_batched_tokens, "max_num_seqs": d.max_num_seqs}
    cls = type(engine)
    try:
        checked = cls.model_validate({**engine.model_dump(exclude_unset=True), **{k: resolved[k] for k in unset}})
    except ValidationError as exc:
        problem = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
        raise ValueError(f"engine: {problem} (with vLLM's default {', '.join(f'{k} {resolved[k]}' for k in unset)} "
                         f"for {d.card_class}); set {' and '.join('engine.' + k for k in unset)} too") from None
    return cls.model_construct(_fields_set=set(engine.model_fields_set), **dict(checked))


def applied_defaults(engine, device: DeviceSpec) -> dict[str, object]:
    """The vLLM defaults a resolved vllm_v1 `engine` runs with for keys its config left unset,
    by engine key ({} for other schedulers or when every such key was set), with the card class
    they come from under "card" (for reports)."""
    if engine.scheduler != "vllm_v1":
        return {}
    out: dict[str, object] = {key: getattr(engine, key) for key in DEFAULTED_KEYS
                              if key not in engine.model_fields_set}
    if out:
        out["card"] = vllm_defaults(device, engine.max_model_len or 1 << 20).card_class
    return out
