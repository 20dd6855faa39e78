"""Sliding-window attention: which layers of a Hugging Face config are windowed, and the work a
windowed layer does.

A windowed layer's query at position p (0-based) attends to the keys at positions
max(0, p − W + 1) .. p: W keys, its own included. vLLM runs it as flash attention with
`window_size = (sliding_window − 1, 0)` and frees the KV blocks no later query can see
(`SlidingWindowManager`, `profiler.kv_cache_groups`).

The layer pattern, as each config family spells it (transformers' config classes, which vLLM reads):

- `layer_types`: one entry per layer, "full_attention" or "sliding_attention" (gpt-oss, Gemma-2/3 and
  Qwen2/3 configs of transformers >= 4.53 write it out); any other entry ("chunked_attention",
  "linear_attention", ...) is refused;
- `sliding_window_pattern` (Gemma-3 configs before `layer_types`: `Gemma3TextConfig`): layer i is
  windowed unless (i + 1) % pattern == 0 — 5 local : 1 global for pattern 6;
- `use_sliding_window` with `max_window_layers` (Qwen2 / Qwen3 / their MoE: `Qwen2Config`): layers
  i >= max_window_layers are windowed when use_sliding_window is true; false is full attention,
  and so is a Qwen config without it: those config classes default it to False and then set
  `sliding_window = None` (transformers `Qwen2Config` / `Qwen3Config` / `Qwen3MoeConfig`:
  `self.sliding_window = sliding_window if self.use_sliding_window else None`), the attribute
  vLLM 0.19's `ModelConfig.get_sliding_window` returns (vllm/config/model.py), whatever the
  file's `sliding_window` or `layer_types` say; a Qwen config with use_sliding_window true,
  no layer_types and no max_window_layers is refused (the default is the class's, not the file's);
- `sliding_window` alone (Mistral: `MistralConfig`, no `use_sliding_window`): every layer.

Where a config.json omits a key, the transformers class's default is what vLLM reads
(`class_defaults`): `MistralConfig.sliding_window` 4096; `GptOssConfig.sliding_window` 128 and
`layer_types` alternating from a windowed layer 0 ("sliding_attention" if (i + 1) % 2 else
"full_attention"). A Qwen config with use_sliding_window true and no sliding_window is refused.

A window of at least `max_position_embeddings` never drops a token: that is full attention
(vLLM's `ModelConfig.get_sliding_window` returns the window, and the attention is the same).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

FULL, SLIDING = "full_attention", "sliding_attention"
# model_types whose transformers config class has `use_sliding_window` (default False):
# Qwen2Config, Qwen3Config, Qwen2MoeConfig, Qwen3MoeConfig.
USE_SLIDING_WINDOW_TYPES = ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe")
# transformers' `sliding_window` default where the file omits the key: MistralConfig, GptOssConfig.
WINDOW_DEFAULTS = {"mistral": 4096, "gpt_oss": 128}


def class_defaults(config: dict) -> dict:
    """`config` with the window fields its transformers class fills in when the file omits them
    (module docstring): a Mistral or gpt-oss `sliding_window`, gpt-oss's alternating `layer_types`
    (only with a window: with `sliding_window: null` vLLM windows no layer). A copy; `config` is kept."""
    out = dict(config)
    model_type = out.get("model_type")
    if model_type in WINDOW_DEFAULTS and "sliding_window" not in out:
        out["sliding_window"] = WINDOW_DEFAULTS[model_type]
    layers = out.get("num_hidden_layers")
    if (model_type == "gpt_oss" and out.get("layer_types") is None and out.get("sliding_window") not in (None, 0)
            and isinstance(layers, int) and not isinstance(layers, bool) and layers >= 1):
        out["layer_types"] = [SLIDING if (i + 1) % 2 else FULL for i in range(layers)]
    return out


def _whole(config: dict, key: str, path: Path, minimum: int = 1) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{path}: {key} must be a whole number >= {minimum}, got {value!r}")
    return value


def layer_pattern(config: dict, path: Path) -> list[bool]:
    """Per layer, whether it is windowed (module docstring), read from `config` (a config.json's object).

    Raises:
        ValueError: `layer_types` of the wrong length or naming another attention type, a
            pattern or max_window_layers that is not a whole number, a pattern given in two
            spellings that disagree, a Qwen config's use_sliding_window true with neither
            layer_types nor max_window_layers or without sliding_window; the message names
            `path` and the field.
    """
    config = class_defaults(config)
    num_layers = _whole(config, "num_hidden_layers", path)
    layer_types = config.get("layer_types")
    pattern = config.get("sliding_window_pattern")
    uses = config.get("use_sliding_window")
    if config.get("model_type") in USE_SLIDING_WINDOW_TYPES:
        uses = bool(uses)  # the config class's default, False, when the file omits it
        if uses and layer_types is None and config.get("max_window_layers") is None:
            raise ValueError(f"{path}: use_sliding_window is true but max_window_layers is not set: give the "
                             "first windowed layer (0 for every layer)")
        if uses and config.get("sliding_window") is None:
            raise ValueError(f"{path}: use_sliding_window is true but sliding_window is not set: give the window "
                             "in tokens, or use_sliding_window: false for full attention")
    window_set = config.get("sliding_window") not in (None, 0, False)
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != num_layers:
            raise ValueError(f"{path}: layer_types must list one entry per layer ({num_layers}), got {layer_types!r}")
        other = sorted({str(t) for t in layer_types} - {FULL, SLIDING})
        if other:
            raise ValueError(f"{path}: layer_types names {other}: only {FULL!r} and {SLIDING!r} layers are priced")
        sliding = [t == SLIDING for t in layer_types]
        if any(sliding) and not window_set:
            raise ValueError(f"{path}: layer_types has sliding_attention layers but sliding_window is not set")
        if pattern is not None and sliding != _every_nth_full(num_layers, _whole(config, "sliding_window_pattern", path)):
            raise ValueError(f"{path}: sliding_window_pattern={pattern!r} disagrees with layer_types")
        return sliding if uses is not False else [False] * num_layers
    if not window_set or uses is False:
        return [False] * num_layers
    if pattern is not None:
        return _every_nth_full(num_layers, _whole(config, "sliding_window_pattern", path))
    if uses is True and config.get("max_window_layers") is not None:
        first = _whole(config, "max_window_layers", path, minimum=0)
        return [i >= first for i in range(num_layers)]
    return [True] * num_layers


def _every_nth_full(num_layers: int, pattern: int) -> list[bool]:
    """Gemma-3's rule: layer i is windowed unless (i + 1) % pattern == 0."""
    return [bool((i + 1) % pattern) for i in range(num_layers)]


def read_sliding_window(config: dict, path: Path) -> tuple[int, int]:
    """(sliding_window, windowed layers) of a config; (0, 0) for full attention everywhere.

    Raises:
        ValueError: as `layer_pattern`, or a `sliding_window` that is not a whole number >= 1
            where layers are windowed (the message names `path` and the field).
    """
    config = class_defaults(config)
    sliding = layer_pattern(config, path)
    if not any(sliding):
        return 0, 0
    window = _whole(config, "sliding_window", path)
    limit = config.get("max_position_embeddings")
    if isinstance(limit, int) and window >= limit:
        return 0, 0  # the window never drops a token: full attention
    return window, sum(sliding)


def windowed_pairs(q: np.ndarray, c: np.ndarray, window: int) -> np.ndarray:
    """Query-key pairs one windowed layer computes per sequence: sum over the q query tokens at
    positions c .. c + q − 1 of min(position + 1, window). Arrays of shape (num_seqs,), floats.

    E.g. a decode (q 1) over a 100,000-token context with window 128: 128 pairs (full: 100,001);
    a 4-token chunk after 2 tokens with window 4: 3 + 4 + 4 + 4 = 15."""
    first, last = c + 1, c + q  # each query's keys before the window caps them
    below_end = np.minimum(last, window)
    below = np.maximum(below_end - first + 1, 0)  # queries whose keys are not capped
    return below * (first + below_end) / 2 + (q - below) * window


def windowed_kv_tokens(q: np.ndarray, c: np.ndarray, window: int) -> np.ndarray:
    """KV tokens one windowed layer reads per sequence: positions max(0, c + 1 − window) .. c + q − 1,
    i.e. min(c + q, window − 1 + q)."""
    return np.minimum(c + q, window - 1 + q)
