"""`layouts:`: a sweep axis of every parallel layout of N GPUs. The model is here; the layouts a
point expands into are `experiments.config.variants.layouts_of`."""
from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from experiments.config.base import _Strict


class LayoutsConfig(_Strict):
    """`layouts: {gpus: N}`: a sweep axis that crosses every point with every parallel layout of
    exactly N GPUs the model can take (`experiments.planning.layouts`), in vLLM's flag names: for
    a mixture of experts one data-parallel group, `tensor_parallel_size` × `data_parallel_size` = N,
    with `enable_expert_parallel` off and on (EP = N); for a dense model `tensor_parallel_size` ×
    `pipeline_parallel_size` × `data_parallel_size` = N (DP only without PP; vLLM runs a dense
    model's DP ranks as independent engines); and, with `replicas: true`, `replicas` behind the
    point's router where DP cannot say it: of a DP-1 MoE engine, of a pipelined dense engine. A
    layout the model cannot take (TP not dividing its heads, EP not dividing its experts, ...) is
    skipped with the reason in the warnings and the report. `layouts:` sets those engine keys
    itself, so they (and `num_gpus`) may not be set beside it."""

    gpus: int = Field(ge=1, le=1024)  # GPUs of every layout (experiments.planning.layouts.MAX_LAYOUT_GPUS)
    replicas: bool = True  # also replicas of a smaller engine; false: one engine on all the GPUs

    @field_validator("gpus", mode="before")
    @classmethod
    def _whole_gpus(cls, value: Any) -> Any:
        # One message naming what is valid instead of pydantic's per-type ones ("4.0", "4" and 0 alike).
        if not isinstance(value, int) or not 1 <= value <= 1024:
            raise ValueError("must be a whole number of GPUs from 1 to 1024, e.g. layouts: {gpus: 8}")
        return value
