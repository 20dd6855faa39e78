"""What an iteration costs: model and device specs, the KV pool size, and the cost models.

Imports nothing of the project outside `profiler/` (DESIGN.md "Layout"). The names below are
imported when first used (PEP 562 `__getattr__`), so importing one light module of the package
(`profiler.atomic_write`, which `sarathi-sim --help` reaches through `experiments.outputs`) does
not import numpy and pydantic with the cost models.
"""
from importlib import import_module

_EXPORTS = {
    "BUILTIN_DEVICES": "profiler.device_spec",
    "BUILTIN_MODELS": "profiler.model_spec",
    "CostModel": "profiler.cost_model",
    "DeviceSpec": "profiler.device_spec",
    "ModelSpec": "profiler.model_spec",
    "RooflineCostModel": "profiler.roofline",
    "get_device_spec": "profiler.device_spec",
    "get_model_spec": "profiler.model_spec",
    "kv_pool_blocks": "profiler.memory",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'profiler' has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value  # once: later lookups do not come here
    return value
