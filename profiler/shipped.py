"""Which measured profile a config's `cost_model` names, and the fitted model it loads.

`cost_model` (DESIGN.md "Files"):
- `roofline`: the datasheet roofline (`RooflineCostModel`); no profile.
- `profile:DIR`: the profile directory DIR (`sarathi-sim profile`), fitted (`sarathi-sim fit`).
- `auto`: the profile shipped for the (device, model) pair under `profiler/data/<device>/<model>/`
  when there is one (measured on that GPU and committed as data), else the roofline.
"""
from __future__ import annotations

from pathlib import Path

from typing import TYPE_CHECKING

from profiler.model_spec import ModelSpec
from profiler.profile_data import SIDECAR, Profile, ProfileError

DATA_DIR = Path(__file__).resolve().parent / "data"
PROFILE_PREFIX = "profile:"

if TYPE_CHECKING:
    from profiler.fitted import FittedCostModel


def parse_cost_model(value: str) -> str:
    """Check a `cost_model` value; returns it unchanged.

    Raises:
        ValueError: not `auto`, `roofline` or `profile:DIR` with DIR a profile directory (the
            message says which and why).
    """
    if value in ("auto", "roofline"):
        return value
    if not value.startswith(PROFILE_PREFIX):
        raise ValueError(f"cost_model {value!r}: valid values are auto, roofline, profile:DIR")
    directory = Path(value[len(PROFILE_PREFIX):]).expanduser()
    if not (directory / SIDECAR).is_file():
        raise ValueError(f"cost_model {value!r}: {directory} is not a profile directory (no {SIDECAR}); "
                         "create one with `sarathi-sim profile`")
    return value


def shipped_profile_dir(device: str, model: str, data_dir: Path = DATA_DIR) -> Path | None:
    """`data_dir/<device>/<model>/` when it holds a profile, else None."""
    directory = data_dir / device / Path(str(model)).name
    return directory if (directory / SIDECAR).is_file() else None


def profile_dir_for(cost_model: str, device: str, model: str, data_dir: Path = DATA_DIR) -> Path | None:
    """The profile directory a `cost_model` value selects, or None for the roofline."""
    if cost_model.startswith(PROFILE_PREFIX):
        return Path(cost_model[len(PROFILE_PREFIX):]).expanduser()
    if cost_model == "auto":
        return shipped_profile_dir(device, model, data_dir)
    return None


def load_fitted(directory: str | Path, model: ModelSpec | None = None,
                tensor_parallel_size: int | None = None) -> FittedCostModel:
    """The fitted model of a profile directory: `cost_model.joblib` when `sarathi-sim fit` wrote
    one after the profile, else a fit in memory (not written: sweep workers share the folder).

    Args:
        model, tensor_parallel_size: when given, must match the profile's.

    Raises:
        ProfileError: not a profile directory, or a model / tp the profile was not measured for.
    """
    # scikit-learn (≈3 CPU-s to import) only when a profile is really used, not for `auto` on the roofline.
    from profiler.fit_report import MODEL_FILE
    from profiler.fitted import FittedCostModel

    directory = Path(directory)
    profile = Profile.load(directory)
    measured, tp = profile.model, profile.meta["tensor_parallel_size"]
    if model is not None and _shape(model) != _shape(measured):
        raise ProfileError(f"{directory}: profiled for model {measured.name!r}, whose shapes differ "
                           f"from {model.name!r}")
    if tensor_parallel_size is not None and tensor_parallel_size != tp:
        raise ProfileError(f"{directory}: profiled at tensor_parallel_size {tp}, the point "
                           f"uses {tensor_parallel_size}")
    saved = directory / MODEL_FILE
    if saved.is_file() and saved.stat().st_mtime >= (directory / SIDECAR).stat().st_mtime:
        return FittedCostModel.load(saved)
    return FittedCostModel.fit(profile, source=str(directory))


def _shape(model: ModelSpec) -> tuple:
    return (model.num_layers, model.hidden_size, model.num_attention_heads, model.num_key_value_heads,
            model.head_dim, model.intermediate_size, model.vocab_size)
