"""The `vllm serve` flags that reproduce a simulated point (REFERENCE.md §2.2, §2.3), and the whole
command line (`vllm serve MODEL FLAGS`, as `sarathi-sim flags RUN --point K` prints it).

Flag names are vLLM 0.19's engine arguments (`vllm/engine/arg_utils.py`, `EngineArgs.add_cli_args`,
fields of `vllm/config/{scheduler,cache,model,parallel,speculative}.py`).
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path

from dataclasses import dataclass
from typing import Any, Mapping, Union

from experiments.config import CHUNKING_SCHEDULERS, DraftModel, EngineConfig, SweepConfig

# Hugging Face repositories of the built-in model specs (profiler/model_spec.py, whose comments
# cite these repositories' config.json), the names `vllm serve` downloads. mistral-7b is v0.2
# (32k context, no sliding window), published by Mistral as the Instruct model only.
HF_MODEL_IDS = {
    "llama-2-7b": "meta-llama/Llama-2-7b-hf",
    "llama-2-13b": "meta-llama/Llama-2-13b-hf",
    "llama-2-70b": "meta-llama/Llama-2-70b-hf",
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama-3-70b": "meta-llama/Meta-Llama-3-70B",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B",
    "mistral-7b": "mistralai/Mistral-7B-Instruct-v0.2",
    "mistral-nemo-12b": "mistralai/Mistral-Nemo-Base-2407",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "qwen3-14b": "Qwen/Qwen3-14B",
    "qwen3-32b": "Qwen/Qwen3-32B",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "qwen3-30b-a3b-instruct-2507": "Qwen/Qwen3-30B-A3B-Instruct-2507",
    "gemma-3-27b": "google/gemma-3-27b-it",
    "gpt-oss-120b": "openai/gpt-oss-120b",
    "gpt-oss-20b": "openai/gpt-oss-20b",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "deepseek-r1": "deepseek-ai/DeepSeek-R1",
    "kimi-k2": "moonshotai/Kimi-K2-Instruct",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B",
    "llama-3.3-70b": "meta-llama/Llama-3.3-70B-Instruct",
    "llama-3.1-405b": "meta-llama/Llama-3.1-405B",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    # FP8 checkpoints: vLLM reads their quantization_config itself (no --quantization needed).
    "llama-3.1-70b-fp8": "RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8",
    "qwen3-32b-fp8": "Qwen/Qwen3-32B-FP8",
    "qwen3-235b-a22b-fp8": "Qwen/Qwen3-235B-A22B-FP8",
    "qwen3-30b-a3b-fp8": "Qwen/Qwen3-30B-A3B-FP8",
}
# A `cluster:` point is a prefill and a decode pool (simulator/disaggregated.py), not one command.
DISAGGREGATED_FLAGS = ("(disaggregated: no single vllm serve command; serve each pool's instances with a KV "
                       "connector, --kv-transfer-config)")
# vLLM's --dtype names for the engine.dtype values (bf16 weights; fp8 weights are a quantization).
_VLLM_DTYPE = {"bf16": "bfloat16"}


@dataclass(frozen=True)
class ServedPoint:
    """What the vLLM command needs of a point: its model and engine settings (a `SweepConfig`
    has both too, so every function here takes either)."""

    model: str
    engine: EngineConfig


Point = Union[SweepConfig, ServedPoint]


def served_point_from_row(row: Mapping[str, Any]) -> ServedPoint:
    """A point as a run's points table records it: `model` and the engine settings its scheduler
    read (`EngineConfig.used_settings`: lists and mappings as JSON text; missing or NaN cells are
    keys it did not read).

    Raises:
        ValueError: the row lacks `model`, or its settings are not a valid engine config (a
            table from another version of sarathi-sim); the message names the key.
    """
    import math

    model = row.get("model")
    if not isinstance(model, str):
        raise ValueError("the points table has no model column for this point (it did not run)")
    engine: dict[str, Any] = {}
    for key in EngineConfig.model_fields:
        if key == "num_gpu_blocks":  # the table holds the pool the memory model computed, not a setting
            continue
        value = row.get(key)
        if value is None or isinstance(value, float) and math.isnan(value) or str(value) in ("<NA>", "nan"):
            continue
        value = value.item() if hasattr(value, "item") else value  # numpy / pandas scalars
        if isinstance(value, str) and value[:1] in "[{":
            value = json.loads(value)
        if isinstance(value, float) and value.is_integer() and EngineConfig.model_fields[key].annotation in (
                int, int | None):
            value = int(value)
        engine[key] = value
    try:
        return ServedPoint(model, EngineConfig.model_validate(engine))
    except ValueError as exc:
        raise ValueError(f"the points table's engine settings are not valid here: {exc}") from None


def vllm_model_argument(model: str) -> str:
    """The MODEL argument of `vllm serve` for a config's `model`: a built-in name's Hugging Face
    repository (`HF_MODEL_IDS`), or the folder of a config.json given as a path.

    Raises:
        ValueError: a built-in name with no known repository (says to pass the repository instead).
    """
    path = Path(model).expanduser()
    if path.suffix == ".json" or path.is_file():
        return str(path.parent)
    if path.is_dir() or "/" in model:
        return str(path)
    if model not in HF_MODEL_IDS:
        raise ValueError(f"model {model!r}: no Hugging Face repository is known for it (known: "
                         f"{', '.join(sorted(HF_MODEL_IDS))}); give `vllm serve` the repository or folder yourself")
    return HF_MODEL_IDS[model]


def vllm_serve_command(point: Point) -> str:
    """`vllm serve MODEL FLAGS` for the point: `vllm_model_argument` and `vllm_serve_flags`, plus
    the weights' dtype and the seed, so the command is complete to paste.

    Raises:
        ValueError: as `vllm_model_argument`.
    """
    if getattr(point, "cluster", None) is not None:
        raise ValueError(DISAGGREGATED_FLAGS)
    e = point.engine
    extra = ["--dtype", _VLLM_DTYPE[e.dtype], "--seed", str(e.seed)]
    return " ".join(["vllm", "serve", shlex.quote(vllm_model_argument(point.model)), vllm_serve_flags(point),
                     *map(shlex.quote, extra)])


def vllm_caveats(point: Point) -> list[str]:
    """What the command cannot reproduce of the simulated point, one sentence each (empty when
    nothing): another scheduler than vLLM's own (V1) policy, swap preemption (V1 recomputes
    only), several replicas (one server each, behind your router)."""
    e = point.engine
    notes = []
    if e.scheduler != "vllm_v1":
        notes.append(f"the point was simulated under `{e.scheduler}`; vLLM runs its own (V1) policy with these flags "
                     "(simulate it with engine.scheduler=vllm_v1 to see what vLLM gives)")
    if e.preemption == "swap":
        notes.append("engine.preemption is swap; vLLM V1 preempts by recompute only")
    if e.replicas > 1:
        notes.append(f"engine.replicas is {e.replicas}: start one server per replica behind a {e.router} router")
    if e.num_gpu_blocks is None:
        notes.append("the KV pool vLLM profiles at start-up may differ from the simulated one "
                     "(pin it with engine.num_gpu_blocks, passed as --num-gpu-blocks-override)")
    return notes


def vllm_serve_flags(point: Point) -> str:
    """Command-line flags for `vllm serve MODEL` matching the point's engine settings.

    Chunking schedulers map `chunk_size` to `--max-num-batched-tokens` with chunked prefill on;
    non-chunking ones to `--max-num-batched-tokens` = their budget (max_model_len when unset, the
    simulator's default) with chunked prefill off. `engine.num_gpu_blocks` becomes
    `--num-gpu-blocks-override` (vLLM's CacheConfig.num_gpu_blocks_override).
    Split-N maps to `--speculative-config` (`ngram`, or `draft_model` with the draft's name).
    `engine.kv_offload` maps to `--kv-offloading-backend native --kv-offloading-size GiB`;
    `engine.enable_prefix_caching: false` under vllm_v1 to `--no-enable-prefix-caching`;
    `engine.cpu_offload_gb` to `--cpu-offload-gb GiB`, `engine.enforce_eager: true` to `--enforce-eager`.
    vLLM's own policy is v1's; a point simulated under another scheduler shares only its flags.
    A disaggregated point (`cluster:`) has no one command: `DISAGGREGATED_FLAGS` says so.
    """
    if getattr(point, "cluster", None) is not None:
        return DISAGGREGATED_FLAGS
    e = point.engine
    flags: list[str] = []
    if e.scheduler in CHUNKING_SCHEDULERS:
        flags += ["--enable-chunked-prefill", "--max-num-batched-tokens", str(e.chunk_size)]
    else:
        flags += ["--no-enable-chunked-prefill"]
        # No budget set: the simulator's is max_model_len (a whole prompt per step), as V0's was.
        budget = e.max_num_batched_tokens or e.max_model_len
        if budget:
            flags += ["--max-num-batched-tokens", str(budget)]
    if e.long_prefill_token_threshold:
        flags += ["--long-prefill-token-threshold", str(e.long_prefill_token_threshold)]
    flags += ["--max-num-seqs", str(e.max_num_seqs), "--block-size", str(e.block_size),
              "--gpu-memory-utilization", f"{e.gpu_memory_utilization:g}"]
    if e.max_model_len:
        flags += ["--max-model-len", str(e.max_model_len)]
    if e.num_gpu_blocks:
        flags += ["--num-gpu-blocks-override", str(e.num_gpu_blocks)]
    if e.tensor_parallel_size > 1:
        flags += ["--tensor-parallel-size", str(e.tensor_parallel_size)]
    if e.pipeline_parallel_size > 1:
        flags += ["--pipeline-parallel-size", str(e.pipeline_parallel_size)]
    if e.data_parallel_size > 1:
        flags += ["--data-parallel-size", str(e.data_parallel_size)]
    if e.enable_expert_parallel:
        flags += ["--enable-expert-parallel"]
    # engine.quantization is vLLM's --quantization (a BF16 checkpoint quantised at load; a quantised
    # checkpoint's own method needs no flag); kv_cache_dtype its --kv-cache-dtype (bf16 = auto).
    if e.scheduler == "vllm_v1" and e.enable_prefix_caching is False:  # V1 caches prefixes by default
        flags += ["--no-enable-prefix-caching"]
    if e.quantization:
        flags += ["--quantization", e.quantization]
    if e.kv_cache_dtype not in ("auto", "bf16"):
        flags += ["--kv-cache-dtype", e.kv_cache_dtype]
    if e.policy == "priority":
        flags += ["--scheduling-policy", "priority"]
    if e.kv_offload is not None and e.kv_offload.cpu_gib > 0:
        # vllm/config/vllm.py: native -> OffloadingConnector, cpu_bytes_to_use = size * 2**30 (all ranks)
        flags += ["--kv-offloading-backend", e.kv_offload.connector, "--kv-offloading-size", f"{e.kv_offload.cpu_gib:g}"]
    if e.enforce_eager:  # no CUDA graphs (vllm/config/model.py ModelConfig.enforce_eager)
        flags += ["--enforce-eager"]
    if e.cpu_offload_gb > 0:  # vllm/config/offload.py: UVA offload of this many GiB of weights per GPU
        flags += ["--cpu-offload-gb", f"{e.cpu_offload_gb:g}"]
    if e.split_n:
        spec = {"method": "ngram", "num_speculative_tokens": e.split_n}
        if isinstance(e.draft, DraftModel):
            spec = {"method": "draft_model", "model": e.draft.model, "num_speculative_tokens": e.split_n}
        flags += ["--speculative-config", json.dumps(spec)]
    return " ".join(shlex.quote(f) for f in flags)
