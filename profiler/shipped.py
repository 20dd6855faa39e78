"""Which measured profile a config's `cost_model` names, and the fitted model it loads.

`cost_model` (DESIGN.md "Files"):
- `roofline`: the datasheet roofline (`RooflineCostModel`); no profile.
- `profile:DIR`: the profile directory DIR (`sarathi-sim profile`), fitted (`sarathi-sim fit`).
- `auto`: the profile shipped for the (device, model) pair under `profiler/data/<device>/<model>/`
  when there is one (measured on that GPU and committed as data), else the roofline.
"""
from __future__ import annotations

from collections.abc import Mapping
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
    if value.startswith("measured:"):  # imported kernel tables (`sarathi-sim profile import`)
        from profiler.measured.shipped import measured_dirs

        measured_dirs(value)
        return value
    if not value.startswith(PROFILE_PREFIX):
        raise ValueError(f"cost_model {value!r}: valid values are auto, roofline, profile:DIR, measured:DIR[,DIR...]")
    directory = Path(value[len(PROFILE_PREFIX):]).expanduser()
    if not (directory / SIDECAR).is_file():
        raise ValueError(f"cost_model {value!r}: {directory} is not a profile directory (no {SIDECAR}); "
                         "create one with `sarathi-sim profile`")
    return value


def shipped_profile_dir(device: str, model: str, data_dir: Path = DATA_DIR) -> Path | None:
    """`data_dir/<device>/<model>/` when it holds a profile, else None."""
    directory = data_dir / device / Path(str(model)).name
    return directory if (directory / SIDECAR).is_file() else None


def profile_dir_for(cost_model: str, device, model: str, data_dir: Path = DATA_DIR) -> Path | None:
    """The profile directory a `cost_model` value selects, or None for the roofline.

    `device`: the config's `device:` value (a name, a device file path, an inline mapping) or a
    `DeviceSpec`; `auto` looks under its name.
    """
    if cost_model.startswith(PROFILE_PREFIX):
        return Path(cost_model[len(PROFILE_PREFIX):]).expanduser()
    if cost_model == "auto":
        name = getattr(device, "name", None) or (device.get("name") if isinstance(device, Mapping) else device)
        return shipped_profile_dir(str(name), model, data_dir)
    return None


def _device_meta(meta: dict) -> dict:
    return meta["device"] if isinstance(meta.get("device"), dict) else {}


def measured_device(meta: dict) -> tuple[str | None, str]:
    """(key, description) of the device a profile's sidecar says it was measured on.

    key: the built-in device name (`device.spec_name`, e.g. "h100-sxm": set by the harness on a
    known GPU and by the importers), "cpu" for a CPU profile, else None (a GPU with no built-in
    name); description: its recorded name and kind, for messages ("AMD EPYC, cpu").
    """
    device = _device_meta(meta)
    key = device.get("spec_name") or ("cpu" if device.get("kind") == "cpu" else None)
    return key, ", ".join(str(device[k]) for k in ("name", "kind") if device.get(k)) or "unknown device"


def check_device(directory: str | Path, meta: dict, device_name: str) -> None:
    """Refuse to price `device_name` from a profile measured on another device.

    Timings are the measured device's own: a CPU profile priced an H100 at a P99 TBT of 159 s
    (issue 14). The point's device must carry the profile's device key (`measured_device`: the
    built-in name, or `cpu` for a CPU profile, whose host is described in a device file named
    `cpu`, as tests/data/engine/tiny_engine.yaml); a profile of a GPU without a built-in name matches a device described under its
    recorded name.

    Raises:
        ProfileError: the devices differ; the message names both and what would be valid.
    """
    key, description = measured_device(meta)
    recorded = _device_meta(meta).get("name")
    if device_name in {key, recorded} - {None}:
        return
    head = (f"{directory}: measured on {key or recorded or 'an unrecorded device'!r} ({description}; "
            f"{SIDECAR} device), but the point prices device {device_name!r}: a profile prices only the "
            "device it was measured on")
    if key == "cpu":
        raise ProfileError(f"{head}; a CPU profile prices the CPU engine: give device: a device file with "
                           "name: cpu describing the host (as tests/data/engine/tiny_engine.yaml does), or use a profile "
                           f"measured on {device_name!r}")
    want = key or (f"a device file named {recorded!r}" if recorded else "the device it was measured on")
    raise ProfileError(f"{head}; set device: {want}, or use a profile measured on {device_name!r}")


def checked_profile(directory: str | Path, model: ModelSpec | None = None,
                    tensor_parallel_size: int | None = None, device: str | None = None) -> Profile:
    """The profile of `directory` after every check a point needs, without fitting it (cheap
    enough to run on each point of a config before any of them is simulated).

    Args:
        model, tensor_parallel_size: when given, must match the profile's.
        device: when given, the name of the device the point prices: must be the profile's
            (`check_device`).

    Raises:
        ProfileError: not a profile directory; a model, tp or device the profile was not measured
            for; or a profile too thin to fit (`fitted.check_fit_coverage`).
    """
    from profiler.fitted import check_fit_coverage  # scikit-learn: only when a profile is really used

    directory = Path(directory)
    profile = Profile.load(directory)
    measured, tp = profile.model, profile.meta["tensor_parallel_size"]
    if model is not None and _shape(model) != _shape(measured):
        raise ProfileError(f"{directory}: profiled for model {measured.name!r}, whose shapes differ "
                           f"from {model.name!r}")
    if tensor_parallel_size is not None and tensor_parallel_size != tp:
        raise ProfileError(f"{directory}: profiled at tensor_parallel_size {tp}, the point "
                           f"uses {tensor_parallel_size}")
    if device is not None:
        check_device(directory, profile.meta, device)
    check_fit_coverage(profile, directory)
    return profile


def load_fitted(directory: str | Path, model: ModelSpec | None = None,
                tensor_parallel_size: int | None = None, device: str | None = None) -> FittedCostModel:
    """The fitted model of a profile directory, fitted in memory from its CSVs (deterministic:
    the regressors are seeded, so it equals the `cost_model.joblib` that `sarathi-sim fit` wrote;
    a fit takes ~0.2 s). The saved file is never loaded here: unpickling a file from a folder
    others can write (a shared profile or calibration directory) can run code. Nothing is written
    (sweep workers share the folder).

    Args and raises: as `checked_profile`.
    """
    # scikit-learn (≈3 CPU-s to import) only when a profile is really used, not for `auto` on the roofline.
    from profiler.fitted import FittedCostModel

    profile = checked_profile(directory, model, tensor_parallel_size, device)
    return FittedCostModel.fit(profile, source=str(directory))


def _shape(model: ModelSpec) -> tuple:
    return (model.num_layers, model.hidden_size, model.num_attention_heads, model.num_key_value_heads,
            model.head_dim, model.intermediate_size, model.vocab_size, model.qkv_bias, model.qk_norm)
