"""`engine.kv_offload`: a KV tier in host memory behind the GPU prefix cache
(simulator/scheduler/kv_offload.py), and its checks."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from experiments.config.base import _Strict

# `EngineConfig` (experiments.config.engine) is named in annotations only, as text: it imports this module.


class KvOffloadConfig(_Strict):
    """A KV tier in host memory, as vLLM's `--kv-offloading-backend native --kv-offloading-size
    GiB` runs it. `cpu_gib`: the tier of one engine (a replica, or each DP rank of one), over
    all its ranks (vLLM's `cpu_bytes_to_use = size * 2**30`); 0: no tier. `disk_gib`: a disk
    tier behind it (vLLM's native connector has none: `vllm/v1/kv_offload/factory.py`, snapshot
    07b1349, registers `CPUOffloadingSpec` only; not modelled: must be 0). `connector`: `native`
    (vLLM's OffloadingConnector); `lmcache` is not modelled (an error)."""

    cpu_gib: float = Field(ge=0, allow_inf_nan=False)
    disk_gib: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    connector: Literal["native", "lmcache"] = "native"


def check_kv_offload(e: "EngineConfig", engine_key: str = "engine") -> None:
    """The engine-level checks of `kv_offload` (`check_kv_offload_host` checks it against the device).

    Raises:
        ValueError: naming `<engine_key>.kv_offload...`: the lmcache connector (not modelled), a
            disk tier (vLLM's native connector has a CPU tier only), a tier without vllm_v1's
            prefix cache (the connector stores and finds blocks by their prefix-cache hashes).
    """
    k = e.kv_offload
    if k is None:
        return
    key = f"{engine_key}.kv_offload"
    if k.connector == "lmcache":
        raise ValueError(f"{key}.connector: lmcache is not modelled (its loads and stores run inside the forward "
                         "pass, and it saves prompts only by default); use connector: native")
    if k.disk_gib > 0:
        raise ValueError(f"{key}.disk_gib: vLLM's native OffloadingConnector has a CPU tier only "
                         f"(vllm/v1/kv_offload/cpu.py; factory.py registers CPUOffloadingSpec alone, a file-system "
                         f"tier such as llm-d's is a spec loaded from outside vLLM), and a disk tier (LMCache's "
                         f"local disk) is not modelled; set disk_gib: 0 (got {k.disk_gib:g})")
    if k.cpu_gib > 0 and not (e.scheduler == "vllm_v1" and e.enable_prefix_caching):
        raise ValueError(f"{key} needs {engine_key}.scheduler vllm_v1 with {engine_key}.enable_prefix_caching true: "
                         f"the offloading connector stores and finds blocks by their prefix-cache hashes (got "
                         f"scheduler {e.scheduler!r}, enable_prefix_caching {e.enable_prefix_caching})")


def check_kv_offload_host(e: "EngineConfig", device, kv_block_bytes: float, engine_key: str = "engine") -> None:
    """`kv_offload.cpu_gib` against the device: each DP rank of a replica holds a tier of that
    size (one vLLM engine core each) in the host memory of the replica's GPUs (the device
    file's `host_memory_gib` per GPU × TP × PP × DP); the tier must hold at least one block of
    `kv_block_bytes` (a block's bytes over every rank; vLLM sizes the tier in whole blocks).

    Raises:
        ValueError: naming `<engine_key>.kv_offload.cpu_gib`: the device gives no host memory,
            the tier does not fit it, or it holds no block.
    """
    k = e.kv_offload
    if k is None or k.cpu_gib == 0:
        return
    key = f"{engine_key}.kv_offload.cpu_gib"
    if device.host_memory_gib is None:
        raise ValueError(f"{key}: device {device.name!r} gives no host_memory_gib (host memory per GPU) to size "
                         "the tier against; add host_memory_gib to its device file")
    gpus = e.tensor_parallel_size * e.pipeline_parallel_size * e.data_parallel_size
    host = device.host_memory_gib * gpus
    if k.cpu_gib * e.data_parallel_size > host:
        raise ValueError(f"{key}: {k.cpu_gib:g} GiB per engine x {e.data_parallel_size} DP rank(s) exceeds the "
                         f"{host:g} GiB of host memory of a replica's {gpus} GPU(s) ({device.host_memory_gib:g} GiB "
                         f"each, device {device.name!r})")
    if k.cpu_gib * 2**30 < kv_block_bytes:
        raise ValueError(f"{key}: {k.cpu_gib:g} GiB holds no KV block ({kv_block_bytes / 2**20:g} MiB each over "
                         "every rank); give at least that, or 0 for no tier")
