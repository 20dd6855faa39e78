"""What an iteration costs: model and device specs, the KV pool size, and the cost models.

Imports nothing of the project outside `profiler/` (DESIGN.md "Layout").
"""
from profiler.cost_model import CostModel
from profiler.device_spec import BUILTIN_DEVICES, DeviceSpec, get_device_spec
from profiler.memory import kv_pool_blocks
from profiler.model_spec import BUILTIN_MODELS, ModelSpec, get_model_spec
from profiler.roofline import RooflineCostModel

__all__ = [
    "BUILTIN_DEVICES",
    "BUILTIN_MODELS",
    "CostModel",
    "DeviceSpec",
    "ModelSpec",
    "RooflineCostModel",
    "get_device_spec",
    "get_model_spec",
    "kv_pool_blocks",
]
