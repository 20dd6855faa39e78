"""The measured tables shipped under `profiler/data/measured/`, and the cost model `auto` and
`measured:DIR` select.

`profiler/data/measured/<device>/<source>/` holds one measured-table directory each (format:
`tables.py`), derived from public kernel databases by `build_shipped.py` (sources, licences and
engine versions in each `measured.json` and in `profiler/data/measured/README.md`).
For a (device, model, TP degree):

- the device's model-specific tables (LLMServingSim) whose model has the same shapes and TP
  degree come first, then its per-shape tables (AIConfigurator), then any other model-specific
  table of the device (its element-wise kernels, width-scaled);
- a device without a shipped folder has no measured model (`auto` then uses the roofline and
  says so in `describe()`).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from profiler.device_spec import DeviceSpec
from profiler.measured.cost_model import MeasuredCostModel, shape_key
from profiler.measured.tables import SIDECAR, MeasuredTableError, MeasuredTables
from profiler.model_spec import ModelSpec

MEASURED_DIR = Path(__file__).resolve().parent.parent / "data" / "measured"
MEASURED_PREFIX = "measured:"


@lru_cache(maxsize=64)
def load_tables(directory: str) -> MeasuredTables:
    """`MeasuredTables.load`, once per directory and process (sweeps build many points)."""
    return MeasuredTables.load(directory)


def shipped_devices(data_dir: Path = MEASURED_DIR) -> list[str]:
    """Device keys with shipped measured tables."""
    return sorted(p.name for p in data_dir.iterdir() if p.is_dir()) if data_dir.is_dir() else []


def shipped_sources(device: str, model: ModelSpec, tensor_parallel_size: int,
                    data_dir: Path = MEASURED_DIR) -> list[MeasuredTables]:
    """The device's shipped tables in preference order (module docstring); [] when none."""
    folder = data_dir / device
    if not folder.is_dir():
        return []
    loaded = [load_tables(str(d)) for d in sorted(folder.iterdir()) if (d / SIDECAR).is_file()]
    exact = [t for t in loaded if t.model is not None and shape_key(t.model) == shape_key(model)
             and t.tensor_parallel_size == tensor_parallel_size]
    per_shape = [t for t in loaded if t.model is None]
    others = [t for t in loaded if t.model is not None and t not in exact]
    return exact + per_shape + others


def measured_dirs(value: str) -> list[Path]:
    """The directories of a `measured:DIR[,DIR...]` cost_model value.

    Raises:
        ValueError: not that form, or a DIR that is not a measured-table directory.
    """
    if not value.startswith(MEASURED_PREFIX):
        raise ValueError(f"cost_model {value!r}: expected measured:DIR[,DIR...]")
    dirs = [Path(p).expanduser() for p in value[len(MEASURED_PREFIX):].split(",") if p]
    if not dirs:
        raise ValueError(f"cost_model {value!r}: no directory after 'measured:'")
    for d in dirs:
        if not (d / SIDECAR).is_file():
            raise ValueError(f"cost_model {value!r}: {d} is not a measured-table directory (no {SIDECAR}); "
                             "create one with `sarathi-sim profile import`")
    return dirs


def build_measured(cost_model: str, model: ModelSpec, device: DeviceSpec, tensor_parallel_size: int = 1,
                   dtype_bytes: int = 2, kv_dtype_bytes: int = 2, **kwargs) -> MeasuredCostModel | None:
    """The measured cost model `cost_model` selects: `measured:DIR,...` (those directories, in that
    order) or `auto` (the shipped tables of the device); None for `auto` when the device has none
    shipped or the activation dtype is not bf16 (the caller then uses the roofline). Quantised
    weights (`model.quantization`) and an FP8 KV cache (`kv_dtype_bytes` 1) are priced from the
    tables' fp8 rows (`MeasuredCostModel`).

    Raises:
        ValueError / MeasuredTableError: a bad `measured:` value, tables of another device, or a
            model the tables cannot price (as `MeasuredCostModel`).
    """
    if cost_model == "auto":
        sources = shipped_sources(device.card, model, tensor_parallel_size)
        if not sources or dtype_bytes != 2:
            return None
    else:
        sources = [load_tables(str(d)) for d in measured_dirs(cost_model)]
    try:
        return MeasuredCostModel(sources, model, device, tensor_parallel_size, dtype_bytes, kv_dtype_bytes,
                                 name=cost_model, **kwargs)
    except MeasuredTableError as exc:
        raise MeasuredTableError(f"cost_model {cost_model}: {exc}") from exc
