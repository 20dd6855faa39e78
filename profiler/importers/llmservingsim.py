"""Import LLMServingSim's per-layer vLLM profiles (casys-kaist/LLMServingSim, MIT,
`profiler/perf/<HW>/<org>/<model>/<variant>/`; copies in ../shared/profiles/llmservingsim/).

Layout read: `meta.yaml` (vllm_version, gpu, model, `engine_effective.hf_overrides`) and
`tp<N>/{dense,attention,per_sequence}.csv`. The profiler runs vLLM 0.19 with `enforce_eager` on one
GPU with the model shrunk to one layer and, for tp<N>, its widths divided by N through
`hf_overrides` (intermediate_size, heads, KV heads, vocab), so each file is one TP rank's kernels
and **no all-reduce is in them**. Every `time_us` is **microseconds** per call.

- `dense.csv` (layer, tokens, time_us): per-layer ops of the step's token count: `qkv_proj`,
  `o_proj`, `gate_up_proj`, `down_proj` (GEMMs), `layernorm` (vLLM's fused add + RMSNorm, twice a
  layer), `qk_norm` (Qwen3's per-head q/k norms), `rotary_emb`, `act_fn` (SiLU · mul), and the
  once-a-step `embedding` and `final_layernorm`. Imported as layer_ops (op names kept).
- `per_sequence.csv` (layer, sequences, time_us): `lm_head`, `sampler`. → sequence_ops.
- `attention.csv` (prefill_chunk, kv_prefill, n_decode, kv_decode, time_us): one attention layer
  call over one prefill chunk of `prefill_chunk` tokens after `kv_prefill` cached tokens and
  `n_decode` decodes of `kv_decode` cached tokens each. → mixed_attention. A row that measures
  nothing (`_empty_attention`) is dropped and counted like a size-0 row of the other tables.
- In every file, one shape measured twice with different times is refused (naming the rows);
  an exact repeat is kept once.
- `moe.csv` (tokens, activated_experts, time_us), mixture-of-experts models only: the whole sparse
  block of one layer (router, native top-k and the fused experts: LLMServingSim
  `profiler/core/hooks/moe_hook.py` forces the routing so that exactly `activated_experts`
  distinct experts receive the `tokens` tokens' top-k picks, cyclically balanced) with every
  expert on the one GPU. → moe_block.

The model's full shapes are not in these files: `model` must be given and must agree with
`hf_overrides` (each overridden width = the model's / N).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from profiler.importers.source_device import GPU_NAMES, recorded_device, resolve_device
from profiler.importers.source_files import (drop_rows, read_csv, read_yaml_mapping, refuse_conflicting_duplicates,
                                             usable_rows)
from profiler.measured.tables import MeasuredTableError, MeasuredTables
from profiler.model_spec import ModelSpec

SOURCE = {"name": "llmservingsim", "repository": "casys-kaist/LLMServingSim", "path": "profiler/perf/",
          "commit": "5daddb2"}
LICENCE = "MIT"
US = 1e-6  # the files' time unit (microseconds) in seconds

# LLMServingSim hardware folder → built-in device key.
HARDWARE = {"RTX4090": "rtx-4090", "RTXPRO6000": "rtx-pro-6000"}
DENSE_OPS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "layernorm", "qk_norm", "rotary_emb",
             "act_fn", "embedding", "final_layernorm")
_FILES = {  # file → (table, key column in the file, key column in the table)
    "dense.csv": ("layer_ops", "tokens", "num_tokens"),
    "per_sequence.csv": ("sequence_ops", "sequences", "num_seqs"),
}
_ATTENTION = {"prefill_chunk": "prefill_tokens", "kv_prefill": "prefill_context_tokens",
              "n_decode": "num_decodes", "kv_decode": "decode_context_tokens"}
# hf_overrides key → the model field it divides by the TP degree.
_OVERRIDES = {"intermediate_size": "intermediate_size", "num_attention_heads": "num_attention_heads",
              "num_key_value_heads": "num_key_value_heads", "vocab_size": "vocab_size"}


def _times(table: pd.DataFrame, path: Path, dropped: dict, keys: list[str], positive: tuple[str, ...] = (),
           non_negative: tuple[str, ...] = (), meaningless=None) -> pd.DataFrame:
    """Rows with a finite time_us > 0 and the counts given usable (`source_files.usable_rows`) and
    not flagged by `meaningless(rows)` (others counted in `dropped`), one per `keys`
    (`source_files.refuse_conflicting_duplicates`), time_us → time_s."""
    out = usable_rows(table, path, dropped, times=("time_us",), positive=positive, non_negative=non_negative)
    if meaningless is not None:
        out = drop_rows(out, meaningless(out), path, dropped)
    out = refuse_conflicting_duplicates(out, keys, "time_us", path)
    return out.drop(columns=["time_us"]).assign(time_s=out["time_us"].to_numpy(dtype=np.float64) * US)


def _empty_attention(table: pd.DataFrame) -> np.ndarray:
    """attention.csv rows whose sizes measure nothing: no prefill chunk and no decodes, a prefill's
    cached context without its chunk (kv_prefill > 0 at prefill_chunk 0), or decodes' context
    without decodes (kv_decode > 0 at n_decode 0). LLMServingSim's profiles have none; a column
    zeroed by damage makes them, and they would collide with the real decode-only rows."""
    chunk, decodes = table["prefill_chunk"].to_numpy(), table["n_decode"].to_numpy()
    return (((chunk == 0) & (decodes == 0)) | ((chunk == 0) & (table["kv_prefill"].to_numpy() > 0))
            | ((decodes == 0) & (table["kv_decode"].to_numpy() > 0)))


def _whole(value, key: str, path: Path) -> int:
    """`value` as an int if it is a whole number (YAML int), else an error naming the key."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise MeasuredTableError(f"{path}: {key} holds {value!r}; expected a whole number")
    return value


def check_model(meta: dict, model: ModelSpec, path: Path) -> None:
    """Raise unless `model` has the widths `hf_overrides` gives at one of the profile's TP degrees.

    One meta.yaml serves every tp<N>/ folder and records the overrides of the last run (the
    largest N), so each overridden width must equal the model's / N for some N in `tp_degrees`.

    Raises:
        MeasuredTableError: naming meta.yaml and the first key that disagrees, or a key that
            is not a whole number (list).
    """
    engine = meta.get("engine_effective") or {}
    overrides = (engine.get("hf_overrides") if isinstance(engine, dict) else None) or {}
    if not isinstance(overrides, dict):
        raise MeasuredTableError(f"{path}: engine_effective.hf_overrides must be a mapping, got {overrides!r}")
    checked = {k: _whole(v, f"engine_effective.hf_overrides.{k}", path) for k, v in overrides.items()
               if k in _OVERRIDES}
    degrees = meta.get("tp_degrees") or [1]
    if not isinstance(degrees, list):
        raise MeasuredTableError(f"{path}: tp_degrees must be a list of TP degrees (e.g. [1, 2]), got {degrees!r}")
    first_bad = None
    for tp in sorted(_whole(t, "tp_degrees", path) for t in degrees):
        bad = []
        for key, value in checked.items():
            try:
                expected = (model.kv_heads_per_rank(tp) if key == "num_key_value_heads"
                            else getattr(model, _OVERRIDES[key]) // tp)
            except ValueError:
                expected = None
            if value != expected:
                bad.append((key, value, expected, tp))
        if not bad:
            return
        first_bad = first_bad or bad[0]
    key, value, expected, tp = first_bad
    raise MeasuredTableError(f"{path}: engine_effective.hf_overrides.{key} is {value}, but model {model.name!r} "
                             f"gives {expected} at tp {tp} (tp_degrees {meta.get('tp_degrees')}): the profile is "
                             "not of this model")


def import_llmservingsim(model_dir: str | Path, model: ModelSpec, tensor_parallel_size: int = 1,
                         device: str | None = None) -> MeasuredTables:
    """Measured tables of one LLMServingSim model profile at one TP degree.

    Args:
        model_dir: the `<HW>/<org>/<model>/<variant>/` folder (holds meta.yaml and tp<N>/).
        model: the profiled model's shapes (its config.json); checked against `hf_overrides`.
        tensor_parallel_size: which `tp<N>/` folder to read.
        device: built-in device key, for hardware the profile does not record in a way this
            project knows (`HARDWARE`, `source_device.GPU_NAMES`); by default the one recorded.

    Raises:
        MeasuredTableError: no meta.yaml or tp<N>/, meta.yaml not valid YAML, a file or column
            missing, a cell that is not a number (naming its row), a file without one usable
            row, a model that contradicts hf_overrides, an unknown hardware without `device`, or
            a `device` that contradicts the recorded hardware / GPU; messages name the file and
            column.
    """
    root = Path(model_dir)
    meta_path = root / "meta.yaml"
    if not meta_path.is_file():
        raise MeasuredTableError(f"{root}: not an LLMServingSim profile folder (no meta.yaml)")
    source_meta = read_yaml_mapping(meta_path)
    tp_dir = root / f"tp{tensor_parallel_size}"
    if not tp_dir.is_dir():
        have = sorted(p.name for p in root.glob("tp*"))
        raise MeasuredTableError(f"{root}: no tp{tensor_parallel_size}/ folder (has {have})")
    hardware = str(source_meta.get("hardware") or (root.parts[-4] if len(root.parts) >= 4 else ""))
    gpu_name = str(source_meta.get("gpu") or "")
    records = [(f"{meta_path.name} gpu", gpu_name, GPU_NAMES.get(gpu_name)),
               (f"{meta_path.name} hardware", hardware, HARDWARE.get(hardware))]
    device = resolve_device(device, recorded_device(records, str(meta_path)), str(meta_path),
                            f"unknown hardware {hardware!r}; pass --device (known: {sorted(HARDWARE)})")
    check_model(source_meta, model, meta_path)
    dropped: dict = {}
    tables, origins = {}, {}
    for file, (name, key, column) in _FILES.items():
        path = tp_dir / file
        raw = _times(read_csv(path, ["layer", key, "time_us"]), path, dropped, ["layer", key], positive=(key,))
        tables[name] = pd.DataFrame({"op": raw["layer"].astype(str).to_numpy(),
                                     column: raw[key].astype(np.int64).to_numpy(),
                                     "time_s": raw["time_s"].to_numpy()})
        origins[name] = {"from": str(path.relative_to(root.parent.parent.parent))}
    unknown = sorted(set(tables["layer_ops"]["op"]) - set(DENSE_OPS))
    if unknown:
        raise MeasuredTableError(f"{tp_dir / 'dense.csv'}: column 'layer' has unknown ops {unknown}; "
                                 f"known: {list(DENSE_OPS)}")
    path = tp_dir / "attention.csv"
    raw = _times(read_csv(path, [*_ATTENTION, "time_us"]), path, dropped, list(_ATTENTION),
                 non_negative=tuple(_ATTENTION), meaningless=_empty_attention)
    mixed = raw.rename(columns=_ATTENTION)[[*_ATTENTION.values(), "time_s"]]
    tables["mixed_attention"] = mixed.astype({c: np.int64 for c in _ATTENTION.values()}).reset_index(drop=True)
    origins["mixed_attention"] = {"from": str(path.relative_to(root.parent.parent.parent))}
    path = tp_dir / "moe.csv"
    if path.is_file():
        if model.moe is None:
            raise MeasuredTableError(f"{path}: a mixture-of-experts table, but model {model.name!r} is dense")
        raw = _times(read_csv(path, ["tokens", "activated_experts", "time_us"]), path, dropped,
                     ["tokens", "activated_experts"], positive=("tokens", "activated_experts"))
        tables["moe_block"] = pd.DataFrame({"num_tokens": raw["tokens"].astype(np.int64).to_numpy(),
                                            "active_experts": raw["activated_experts"].astype(np.int64).to_numpy(),
                                            "time_s": raw["time_s"].to_numpy()})
        origins["moe_block"] = {"from": str(path.relative_to(root.parent.parent.parent))}
    meta = {
        "source": SOURCE, "licence": LICENCE, "engine": "vllm",
        "engine_version": str(source_meta.get("vllm_version", "unknown")),
        "device": {"name": str(source_meta.get("gpu", hardware)), "key": device, "hardware": hardware},
        "dtype": str(source_meta.get("variant", "bf16")),
        "units": {"time_s": "seconds (source: time_us in microseconds)"},
        "measured_with": {"enforce_eager": (source_meta.get("engine_effective") or {}).get("enforce_eager"),
                          "profiled_model": source_meta.get("model")},
        "model": model.to_fields(), "tensor_parallel_size": tensor_parallel_size,
        "dropped_rows": dropped, "tables": origins,
    }
    return MeasuredTables(meta, tables)
