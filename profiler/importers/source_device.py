"""The device an import is for: the GPU the source records (its folder names, the GPU name its
files hold), and `--device` only where the source records none this project knows. Kernel times of
one GPU never price another: a `--device` that contradicts the source's GPU is refused (it would
relabel RTX 4090 tables as h100-sxm, and every run on h100-sxm would then be priced with them).
"""
from __future__ import annotations

from profiler.measured.tables import MeasuredTableError

# `torch.cuda.get_device_name()` as AIConfigurator's parquet `device` column and LLMServingSim's
# meta.yaml `gpu` record it → built-in device key (profiler/device_spec.py).
GPU_NAMES = {
    "NVIDIA A100-SXM4-80GB": "a100-80gb", "NVIDIA A100-SXM4-40GB": "a100-40gb", "NVIDIA A40": "a40",
    "NVIDIA H100 80GB HBM3": "h100-sxm", "NVIDIA H100 PCIe": "h100-pcie", "NVIDIA H200": "h200",
    "NVIDIA B200": "b200", "NVIDIA L4": "l4", "NVIDIA L40S": "l40s", "NVIDIA GeForce RTX 4090": "rtx-4090",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtx-pro-6000",
}


def recorded_device(records: list[tuple[str, str, str | None]], where: str) -> tuple[str, str] | None:
    """The one built-in device the source's records name, as (what recorded it, key), or None
    when none of them names a known GPU.

    Args:
        records: (what recorded it, e.g. "folder h100_sxm"; what it says; the built-in key it maps
            to, or None where unknown).
        where: the source, for the message.

    Raises:
        MeasuredTableError: two records name different GPUs (tables of two GPUs in one source).
    """
    known = [(what, said, key) for what, said, key in records if key is not None]
    if len({key for _, _, key in known}) > 1:
        listed = "; ".join(f"{what} says {said!r} ({key})" for what, said, key in known)
        raise MeasuredTableError(f"{where}: its records name different GPUs ({listed}); one import holds the "
                                 "tables of one GPU")
    return (f"{known[0][0]} says {known[0][1]!r}", known[0][2]) if known else None


def resolve_device(given: str | None, recorded: tuple[str, str] | None, where: str, unknown: str) -> str:
    """The device key of an import: the recorded one, or `given` where the source records none.

    Args:
        given: `--device`, or None.
        recorded: `recorded_device`'s (what recorded it, key), or None.
        where: the source, for the messages.
        unknown: the message (after "WHERE: ") when neither is known.

    Raises:
        MeasuredTableError: `given` contradicts the recorded GPU (naming both), or neither is known.
    """
    if recorded is not None:
        said, key = recorded
        if given is not None and given != key:
            raise MeasuredTableError(
                f"{where}: the tables were measured on {key} ({said}), but --device {given} was given: "
                f"kernel times of one GPU do not price another. Drop --device (it is {key}), or import "
                f"tables measured on {given}")
        return key
    if given is None:
        raise MeasuredTableError(f"{where}: {unknown}")
    return given
