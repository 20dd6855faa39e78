"""A recorded real-engine run (LLMServingSim's bundle format) as ground truth for `verify --against-run`.

A bundle directory holds (as recorded by LLMServingSim's `bench/` harness around vLLM; copies of
two runs are in `../shared/validation/llmservingsim/`):

- `vllm/requests.jsonl`: one JSON object per request: `input_toks`, `output_toks` (tokens), the
  client's `arrival_time` (epoch seconds) and the engine's `queued_ts`, `scheduled_ts`,
  `first_token_ts`, `last_token_ts` (seconds on vLLM's monotonic engine clock, `RequestStateStats`
  of vllm/v1/metrics/stats.py).
- `vllm/meta.json`: `model`, `vllm_version`, `engine_kwargs` (the engine arguments: tensor /
  data parallel size, expert parallel, max_num_seqs, max_num_batched_tokens, max_model_len, dtype,
  kv_cache_dtype, seed).
- `vllm/timeseries.csv` (optional): per second `t, prompt_throughput, gen_throughput, running,
  waiting, kv_cache_pct` as vLLM's stat logger printed them.
- `config.json`: the cluster (card `hardware`, GPUs per instance). Its `npu_mem.mem_util` is
  LLMServingSim's own calibration of its simulator, not vLLM's flag: vLLM's gpu_memory_utilization
  is meta.json's `engine_kwargs.gpu_memory_utilization` (absent: vLLM's default 0.9,
  `CacheConfig.gpu_memory_utilization`), and a recorded pool — meta.json `num_gpu_blocks` (vLLM's
  `cache_config.num_gpu_blocks`, as its `vllm:cache_config_info` gauge and start-up log give it) or
  `engine_kwargs.num_gpu_blocks_override` — is used as the pool instead of sizing one.

Only the engine clock is used: the client's epoch `arrival_time` and the engine's `*_ts` come from
different clocks and are never subtracted from each other. Per request (the README of
`../shared/validation`): TTFT = first_token_ts − queued_ts, E2E = last_token_ts − queued_ts,
TPOT = (last_token_ts − first_token_ts) / (output_toks − 1) for requests with more than one output
token; the trace replays `queued_ts` (from the first request's) as arrivals; the makespan is the
last `last_token_ts` minus the first `queued_ts`.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.outputs import write_atomic
from profiler.json_object import read_json_object
from profiler.quantization import ENGINE_QUANTIZATIONS
from simulator.metrics import percentile_stats
from traces.readers.fields import MAX_TOKENS
from traces.time_bounds import MAX_SPAN_S, short_number

REQUEST_FIELDS = ("input_toks", "output_toks", "queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")
TIMESERIES_COLUMNS = ("t", "prompt_throughput", "gen_throughput", "running", "waiting")
# LLMServingSim's hardware names (its config.json `hardware`, perf/<HW>/ folders) → built-in devices.
HARDWARE_DEVICES = {"RTXPRO6000": "rtx-pro-6000", "RTX4090": "rtx-4090", "H100": "h100-sxm", "H200": "h200",
                    "A100": "a100-80gb", "B200": "b200", "L40S": "l40s"}


@dataclass(frozen=True)
class RecordedRun:
    """A bundle read and checked by `read_recorded_run`.

    Attributes:
        directory: the bundle directory.
        requests: one row per request in engine-arrival order (by `queued_ts`, file order on ties):
            request_id (the file's), prompt_tokens, output_tokens, arrival_s (queued_ts − the
            first queued_ts), ttft_s, e2e_s, tpot_s (NaN for one output token), first_token_s,
            completion_s (on the same clock as arrival_s), scheduled_s.
        meta: vllm/meta.json as read.
        cluster: config.json as read ({} when absent).
        timeseries: vllm/timeseries.csv (`TIMESERIES_COLUMNS` at least) or None when absent.
    """

    directory: Path
    requests: pd.DataFrame
    meta: dict
    cluster: dict
    timeseries: pd.DataFrame | None


def read_recorded_run(directory: str | Path) -> RecordedRun:
    """Read and check a bundle (module docstring).

    Raises:
        ValueError: a missing file, unreadable JSON, a request line without a field of
            `REQUEST_FIELDS` or with a non-finite/negative value, timestamps out of order
            (first token before queued, last before first), fewer than one output token, or a
            timeseries without its columns. The message names the file, line and field.
    """
    directory = Path(directory)
    vllm_dir = directory / "vllm"
    for required in (vllm_dir / "requests.jsonl", vllm_dir / "meta.json"):
        if not required.is_file():
            raise ValueError(f"{directory}: not a recorded run: {required.relative_to(directory)} is missing "
                             "(expected vllm/requests.jsonl, vllm/meta.json[, vllm/timeseries.csv, config.json])")
    meta = _read_json_object(vllm_dir / "meta.json")
    cluster = _read_json_object(directory / "config.json") if (directory / "config.json").is_file() else {}
    requests = _read_requests(vllm_dir / "requests.jsonl")
    _check_request_count(meta, len(requests), vllm_dir)
    timeseries = _read_timeseries(vllm_dir / "timeseries.csv") if (vllm_dir / "timeseries.csv").is_file() else None
    return RecordedRun(directory, requests, meta, cluster, timeseries)


def _check_request_count(meta: dict, count: int, vllm_dir: Path) -> None:
    """meta.json's `num_requests` (when given) is the number of requests recorded: a bundle whose
    requests.jsonl lost or gained lines is not the run its meta.json describes.

    Raises:
        ValueError: naming meta.json, the key, both counts.
    """
    stated = meta.get("num_requests")
    if stated is None:
        return
    if isinstance(stated, bool) or not isinstance(stated, int) or stated != count:
        raise ValueError(f"{vllm_dir / 'meta.json'}: num_requests is {_shown(stated)} but {vllm_dir / 'requests.jsonl'} "
                         f"holds {count} requests: the recording is incomplete or not this run's")


def _read_json_object(path: Path) -> dict:
    return read_json_object(path, "cannot read JSON", "expected a JSON object")


def _read_requests(path: Path) -> pd.DataFrame:
    rows = []
    lines: list[int] = []  # the file line of each row
    seen_ids: dict[str, int] = {}  # request_id (as JSON) → the line that first gave it
    for line_no, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"{path}:{line_no}: not a JSON object ({exc})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{line_no}: expected a JSON object per line")
        rows.append((record.get("request_id", str(line_no)), *(_number(record, k, path, line_no) for k in REQUEST_FIELDS)))
        _check_order(rows[-1], path, line_no)
        _check_unique_id(record, seen_ids, path, line_no)
        lines.append(line_no)
    if not rows:
        raise ValueError(f"{path}: no requests")
    frame = pd.DataFrame(rows, columns=["request_id", *REQUEST_FIELDS])
    _check_span(frame, lines, path)
    frame = frame.sort_values("queued_ts", kind="stable").reset_index(drop=True)
    start = frame["queued_ts"].iloc[0]
    out = pd.DataFrame({"request_id": frame["request_id"].astype(str),
                        "prompt_tokens": frame["input_toks"].astype(np.int64),
                        "output_tokens": frame["output_toks"].astype(np.int64),
                        "arrival_s": frame["queued_ts"] - start,
                        "scheduled_s": frame["scheduled_ts"] - start,
                        "first_token_s": frame["first_token_ts"] - start,
                        "completion_s": frame["last_token_ts"] - start})
    out["ttft_s"] = out["first_token_s"] - out["arrival_s"]
    out["e2e_s"] = out["completion_s"] - out["arrival_s"]
    multi = out["output_tokens"] > 1
    out["tpot_s"] = np.where(multi, (out["completion_s"] - out["first_token_s"]) / (out["output_tokens"] - 1).clip(lower=1),
                             np.nan)
    return out


def _number(record: dict, key: str, path: Path, line_no: int) -> float:
    value = record.get(key)
    tokens = key.endswith("_toks")
    try:  # a JSON integer of thousands of digits is a Python int that no float holds
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{path}:{line_no}: field {key} is {_shown(value)}; expected "
                         + (f"a whole number of tokens from 1 to {MAX_TOKENS}" if tokens
                            else "a finite number >= 0 (seconds on the engine clock)"))
    if tokens and (number != int(number) or not 1 <= number <= MAX_TOKENS):
        raise ValueError(f"{path}:{line_no}: field {key} is {_shown(value)}; expected a whole number of tokens "
                         f"from 1 to {MAX_TOKENS}")
    return number


def _shown(value, limit: int = 40) -> str:
    """repr of a field's value, a long one cut to `limit` characters with its length said."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _check_unique_id(record: dict, seen: dict[str, int], path: Path, line_no: int) -> None:
    """A `request_id` given twice is two recordings of one request, or two requests under one
    name: either way the per-request comparison would pair the wrong ones."""
    if "request_id" not in record:
        return
    request_id = json.dumps(record["request_id"], sort_keys=True)
    if request_id in seen:
        raise ValueError(f"{path}:{line_no}: request_id {_shown(record['request_id'])} is also on line "
                         f"{seen[request_id]}; each request must be recorded once")
    seen[request_id] = line_no


def _check_span(frame: pd.DataFrame, lines: list[int], path: Path) -> None:
    """Every engine-clock timestamp within MAX_SPAN_S of the first queued_ts: the trace written
    from them is read back by the trace readers, which reject arrivals further apart."""
    start = frame["queued_ts"].min()
    stamps = frame[[k for k in REQUEST_FIELDS if k.endswith("_ts")]]
    far = (stamps - start > MAX_SPAN_S).to_numpy()
    if far.any():
        row, column = np.argwhere(far)[0]
        raise ValueError(f"{path}:{lines[row]}: field {stamps.columns[column]} is {float(stamps.iat[row, column])!r}, "
                         f"more than {short_number(MAX_SPAN_S)} s after the first queued_ts ({float(start)!r}); "
                         "expected seconds of one run on the engine clock")


def _check_order(row: tuple, path: Path, line_no: int) -> None:
    _, _, _, queued, scheduled, first, last = row
    for earlier, later, names in ((queued, scheduled, "queued_ts <= scheduled_ts"),
                                  (scheduled, first, "scheduled_ts <= first_token_ts"),
                                  (first, last, "first_token_ts <= last_token_ts")):
        if later < earlier:
            raise ValueError(f"{path}:{line_no}: timestamps out of order: expected {names} ({earlier} > {later})")


def _read_timeseries(path: Path) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise ValueError(f"{path}: cannot read CSV ({exc})") from None
    missing = [c for c in TIMESERIES_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)}; expected {', '.join(TIMESERIES_COLUMNS)}")
    for column in TIMESERIES_COLUMNS:
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = np.flatnonzero(~np.isfinite(values.to_numpy(dtype=float)))
        if bad.size:
            raise ValueError(f"{path}: row {int(bad[0]) + 2}, column {column}: {frame[column].iloc[bad[0]]!r} is not a "
                             "finite number")
        frame[column] = values
    return frame


def measured_summary(run: RecordedRun) -> dict[str, float]:
    """The `simulator.metrics.summarize` keys the recording defines: completed, makespan_s,
    throughput_rps, output_throughput_tps (over the makespan, as the simulator's), and
    ttft_s / tpot_s / e2e_s / scheduling_delay_s percentiles (scheduling delay = scheduled_ts −
    queued_ts, vLLM's queue time). TBT is not recorded per token, so it is absent."""
    r = run.requests
    makespan_s = float(r["completion_s"].max() - r["arrival_s"].min())
    out = {"completed": len(r), "makespan_s": makespan_s, "throughput_rps": len(r) / makespan_s,
           "output_throughput_tps": float(r["output_tokens"].sum()) / makespan_s}
    for name, values in (("ttft_s", r["ttft_s"]), ("tpot_s", r["tpot_s"]), ("e2e_s", r["e2e_s"]),
                         ("scheduling_delay_s", r["scheduled_s"] - r["arrival_s"])):
        out.update(percentile_stats(name, values.to_numpy(dtype=float)))
    return out


def bundle_config(run: RecordedRun, trace_path: Path, overridden: frozenset[str] = frozenset()) -> dict:
    """A `simulate` config (a dict for `experiments.config`) of the recorded deployment: the model
    and card of the bundle, vLLM V1's scheduler with the run's limits (`max_num_batched_tokens` is
    the token budget, `chunk_size` here), its TP degree and gpu_memory_utilization, and the trace at
    `trace_path` (written by `write_trace`). `--set` overrides apply on top; `overridden` names the
    top-level keys they set (`model`, `device`), which are then not mapped from the bundle.

    Raises:
        ValueError: a deployment the simulator cannot reproduce (an unknown card or model; a DP × TP
            × PP that is not the cluster's GPU count; a disaggregated instance, `_check_colocated`;
            an instance `tp_size` other than engine_kwargs.tensor_parallel_size; an engine_kwargs key
            neither modelled nor known timing-free, or a value of one the simulator does not model,
            `_check_kwargs_handled`, `_dtype_and_switches`) — naming the file and key, and the
            `--set` that would name it. Data and expert parallel runs map to `engine.data_parallel_size` /
            `enable_expert_parallel` (simulator/data_parallel.py).
    """
    kwargs = run.meta.get("engine_kwargs")
    meta_path = run.directory / "vllm" / "meta.json"
    if not isinstance(kwargs, dict):
        raise ValueError(f"{meta_path}: no engine_kwargs object (the engine arguments of the run)")
    _check_kwargs_handled(kwargs, meta_path)
    engine: dict = {"scheduler": "vllm_v1",
                    "tensor_parallel_size": _engine_int(kwargs, "tensor_parallel_size", meta_path) or 1,
                    "pipeline_parallel_size": _engine_int(kwargs, "pipeline_parallel_size", meta_path) or 1}
    dp = _engine_int(kwargs, "data_parallel_size", meta_path) or 1
    if dp > 1 or kwargs.get("enable_expert_parallel"):  # simulator/data_parallel.py, profiler/moe_cost.py
        engine.update(data_parallel_size=dp, enable_expert_parallel=bool(kwargs.get("enable_expert_parallel")))
    _check_colocated(run)
    _check_instance_tp(run, engine["tensor_parallel_size"], meta_path)
    gpus = _cluster_gpus(run)
    if gpus is not None:  # the cluster's GPU count must be the engine's DP × TP × PP
        engine["num_gpus"] = gpus
        if gpus != dp * engine["tensor_parallel_size"] * engine["pipeline_parallel_size"]:
            raise ValueError(f"{meta_path}: engine_kwargs data_parallel_size {dp} × tensor_parallel_size "
                             f"{engine['tensor_parallel_size']} × pipeline_parallel_size {engine['pipeline_parallel_size']} "
                             f"does not match the {gpus} GPUs of {run.directory / 'config.json'} (nodes[].instances[].num_npus)")
    for key, source in ENGINE_KWARGS.items():
        value = _engine_int(kwargs, source, meta_path, minimum=0 if key == "seed" else 1)
        if value is not None and key not in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
            engine[key] = value
    engine.update(_dtype_and_switches(kwargs, meta_path))
    engine.update(_async_scheduling(kwargs, run.meta.get("vllm_version"), meta_path))
    instance = _instance(run)
    engine["gpu_memory_utilization"] = _gpu_memory_utilization(kwargs, meta_path)
    blocks = _recorded_blocks(run.meta, kwargs, meta_path)
    if blocks is not None:
        engine["num_gpu_blocks"] = blocks
    # The bundle's arrivals are the engine's `queued_ts` and its TTFT/E2E start there: no front end.
    config = {"name": f"{run.directory.name}-sim", "engine": engine, "frontend": {"enabled": False},
              "trace": {"kind": "file", "path": str(trace_path), "format": "canonical"}}
    if "model" not in overridden:
        _check_same_model(run.meta.get("model"), kwargs.get("model"), meta_path)
        config["model"] = _model(run.meta.get("model"), meta_path)
    if "device" not in overridden:
        config["device"] = _device(instance.get("hardware"), run.directory / "config.json",
                                   (run.directory / "config.json").is_file())
    return config


# The generated config's engine keys → the meta.json engine_kwargs each is read from.
ENGINE_KWARGS = {"tensor_parallel_size": "tensor_parallel_size", "pipeline_parallel_size": "pipeline_parallel_size",
                 "data_parallel_size": "data_parallel_size", "max_num_seqs": "max_num_seqs",
                 "chunk_size": "max_num_batched_tokens", "max_model_len": "max_model_len", "seed": "seed",
                 "block_size": "block_size"}
# ... and those read from config.json.
CLUSTER_KEYS = {"num_gpus": "nodes[].instances[].num_npus"}
# vLLM's default gpu_memory_utilization (vllm/config/cache.py `CacheConfig.gpu_memory_utilization`).
VLLM_GPU_MEMORY_UTILIZATION = 0.9


def _gpu_memory_utilization(kwargs: dict, meta_path: Path) -> float:
    """vLLM's gpu_memory_utilization of the run: engine_kwargs' value, else vLLM's default (never
    config.json's `mem_util`, LLMServingSim's calibration: module docstring).

    Raises:
        ValueError: a value that is not a fraction in (0, 1], naming meta.json and the key.
    """
    value = kwargs.get("gpu_memory_utilization")
    if value is None:
        return VLLM_GPU_MEMORY_UTILIZATION
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"{meta_path}: engine_kwargs.gpu_memory_utilization is {_shown(value)}; "
                         "expected a fraction in (0, 1]")
    return float(value)


def _recorded_blocks(meta: dict, kwargs: dict, meta_path: Path) -> int | None:
    """The KV pool the run recorded (meta.json `num_gpu_blocks`) or forced
    (`engine_kwargs.num_gpu_blocks_override`), in blocks; None when neither is given.

    Raises:
        ValueError: not a whole number >= 1, or both given and different (naming meta.json and keys).
    """
    recorded = _engine_int(meta, "num_gpu_blocks", meta_path, prefix="")
    forced = _engine_int(kwargs, "num_gpu_blocks_override", meta_path)
    if recorded is not None and forced is not None and recorded != forced:
        raise ValueError(f"{meta_path}: num_gpu_blocks {recorded} contradicts engine_kwargs.num_gpu_blocks_override "
                         f"{forced}: vLLM's pool is the override; correct one of them")
    return recorded if recorded is not None else forced


def _engine_int(kwargs: dict, key: str, meta_path: Path, minimum: int = 1, prefix: str = "engine_kwargs.") -> int | None:
    """engine_kwargs[key] (or, with `prefix` "", a top-level meta.json key) as an int (None when
    absent or null); ValueError naming meta.json and the key for anything but a whole number >=
    `minimum`."""
    value = kwargs.get(key)
    if value is None:
        return None
    whole = isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and value.is_integer()
    if not whole or value < minimum:
        raise ValueError(f"{meta_path}: {prefix}{key} is {_shown(value)}; expected a whole number >= {minimum}")
    return int(value)


# The generated config's engine keys read by their own rules (beside ENGINE_KWARGS's whole numbers)
# → their engine_kwargs (`_dtype_and_switches`): a config error on one names that key.
ENGINE_SWITCHES = {"enable_expert_parallel": "enable_expert_parallel", "kv_cache_dtype": "kv_cache_dtype",
                   "quantization": "quantization",
                   "enable_prefix_caching": "enable_prefix_caching"}
# Every engine_kwargs key `bundle_config` reads; `model` is checked against meta.json's `model`,
# `dtype` and `enable_chunked_prefill` checked to be what the simulator models (`_dtype_and_switches`).
MODELLED_KWARGS = (frozenset(ENGINE_KWARGS.values()) | frozenset(ENGINE_SWITCHES.values())
                   | {"model", "dtype", "enable_chunked_prefill", "async_scheduling", "gpu_memory_utilization",
                      "num_gpu_blocks_override"})
# engine_kwargs keys known not to change a step's time or the scheduler's choices, so not simulated:
# logging switches (vLLM's stat logger and request log write after the step; the stat logger is what
# wrote timeseries.csv), and where/how the checkpoint is fetched or named (done before the first
# request is queued; its shapes are the model's config, which `model` names).
TIMING_FREE_KWARGS = frozenset({"disable_log_stats", "disable_log_requests", "enable_log_requests",
                                "trust_remote_code", "download_dir", "served_model_name"})
# vLLM's kv_cache_dtype values (vllm/config/cache.py CacheDType) the simulator prices: the model's
# bf16 (`auto` is the model dtype, checked bf16) or a one-byte fp8 cache.
KV_CACHE_DTYPES = {"auto": None, "bfloat16": None, "bf16": None, "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}


def _check_kwargs_handled(kwargs: dict, meta_path: Path) -> None:
    """Every engine_kwargs key is modelled (`MODELLED_KWARGS`) or known timing-free
    (`TIMING_FREE_KWARGS`): any other engine argument (speculative decoding, quantization,
    enforce_eager, a misspelt key, ...) would be silently simulated as vLLM's default.

    Raises:
        ValueError: naming meta.json, the first such key and its value, and the supported keys.
    """
    for key, value in kwargs.items():
        if key in MODELLED_KWARGS or key in TIMING_FREE_KWARGS or key == "speculative_config" and value is None:
            continue
        why = ("speculative decoding's acceptance is not in the recording: simulate it from a config with "
               "engine.split_n, engine.draft and engine.acceptance" if key == "speculative_config"
               else "--against-run does not model it (simulating vLLM's default in its place would be a silent guess)")
        raise ValueError(f"{meta_path}: engine_kwargs.{key} is {_shown(value)}: {why}; supported engine_kwargs: "
                         f"{', '.join(sorted(MODELLED_KWARGS))} (and, not affecting timing, "
                         f"{', '.join(sorted(TIMING_FREE_KWARGS))}; speculative_config null)")


def _dtype_and_switches(kwargs: dict, meta_path: Path) -> dict:
    """The engine keys of engine_kwargs `dtype`, `kv_cache_dtype`, `enable_prefix_caching` and
    `enable_chunked_prefill` (absent or null: vLLM's default, which is the simulator's).

    dtype bfloat16 (or absent) is the simulator's bf16 model; kv_cache_dtype per `KV_CACHE_DTYPES`;
    enable_prefix_caching true/false maps to the vllm_v1 scheduler's key of that name (on by default
    in V1, vLLM tests/v1/engine/test_engine_args.py::test_prefix_caching_from_cli, as in the
    simulator); enable_chunked_prefill must be true (vLLM V1 chunks long prefills, and so does the
    simulated vllm_v1 scheduler).

    Raises:
        ValueError: any other value, naming meta.json, the key and value, and what is supported.
    """
    engine: dict = {}

    def refuse(key: str, expected: str) -> ValueError:
        return ValueError(f"{meta_path}: engine_kwargs.{key} is {_shown(kwargs[key])}; expected {expected}")

    if kwargs.get("dtype") not in (None, "bfloat16", "bf16"):
        raise refuse("dtype", "bfloat16 (the simulator prices bf16 weights and activations; 'auto' is the "
                              "checkpoint's dtype, which the recording does not say)")
    kv = kwargs.get("kv_cache_dtype")
    if kv is not None:
        if not isinstance(kv, str) or kv not in KV_CACHE_DTYPES:
            raise refuse("kv_cache_dtype", f"one of {', '.join(KV_CACHE_DTYPES)}")
        if KV_CACHE_DTYPES[kv]:
            engine["kv_cache_dtype"] = KV_CACHE_DTYPES[kv]
    quantization = kwargs.get("quantization")  # vLLM --quantization: engine.quantization (profiler/quantization.py)
    if quantization is not None:
        if quantization not in ENGINE_QUANTIZATIONS:
            raise refuse("quantization", f"null or one of {', '.join(ENGINE_QUANTIZATIONS)}")
        engine["quantization"] = quantization
    for key in ("enable_prefix_caching", "enable_chunked_prefill"):
        if kwargs.get(key) is not None and not isinstance(kwargs[key], bool):
            raise refuse(key, "true, false or null")
    if kwargs.get("enable_prefix_caching") is not None:
        engine["enable_prefix_caching"] = kwargs["enable_prefix_caching"]
    if kwargs.get("enable_chunked_prefill") is False:
        raise refuse("enable_chunked_prefill", "true or null (the simulated vllm_v1 scheduler chunks long prefills "
                                               "as vLLM V1 does by default)")
    return engine


def _async_scheduling(kwargs: dict, vllm_version, meta_path: Path) -> dict:
    """`engine.async_scheduling` of the recorded run: engine_kwargs `async_scheduling` when it
    says (true/false); else vLLM's default for meta.json's `vllm_version`: off before 0.14 (async
    scheduling became vLLM's default in 0.14), else left to the simulator's default for vLLM V1
    (`experiments.deployment.async_scheduling_on`); left unset without a readable version.

    Raises:
        ValueError: engine_kwargs.async_scheduling neither true, false nor null (naming meta.json)."""
    value = kwargs.get("async_scheduling")
    if value is not None:
        if not isinstance(value, bool):
            raise ValueError(f"{meta_path}: engine_kwargs.async_scheduling is {_shown(value)}; expected true, false or null")
        return {"async_scheduling": value}
    parts = str(vllm_version or "").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return {}
    return {"async_scheduling": False} if (major, minor) < (0, 14) else {}


def _check_same_model(meta_model, kwargs_model, meta_path: Path) -> None:
    """meta.json's `model` and its engine_kwargs `model` (when given) name one checkpoint."""
    if kwargs_model is not None and kwargs_model != meta_model:
        raise ValueError(f"{meta_path}: engine_kwargs.model is {_shown(kwargs_model)} but model is "
                         f"{_shown(meta_model)}; a recording is of one model")


def _check_instance_tp(run: RecordedRun, tp: int, meta_path: Path) -> None:
    """Every config.json instance's `tp_size` (LLMServingSim's per-instance TP degree), where
    given, is the engine's tensor_parallel_size.

    Raises:
        ValueError: naming both files, the instance's key and both values.
    """
    for n, i, instance in _instances(run):
        tp_size = instance.get("tp_size")
        if tp_size is not None and tp_size != tp:
            raise ValueError(f"{run.directory / 'config.json'}: nodes[{n}].instances[{i}].tp_size is {_shown(tp_size)} "
                             f"but {meta_path}: engine_kwargs.tensor_parallel_size is {tp}; the recording must "
                             "say one TP degree")


def explain_config_error(run: RecordedRun, message: str, config_path: Path, overridden: frozenset[str]) -> str:
    """A `ConfigError` of the config `bundle_config` generated (written at `config_path`), said
    against the bundle: an engine key read from vllm/meta.json or config.json names that file and
    key and its recorded value (unless a `--set` gave the key); anything else names the bundle.

    Args:
        message: the ConfigError's text, "{config_path}: {key} (line N): {detail}" or
            "{config_path}: --set {key}: {detail}".
    """
    prefix = f"{config_path}: "
    rest = message[len(prefix):] if message.startswith(prefix) else message
    where, sep, detail = rest.partition(": ")
    key = where.split(" (line", 1)[0]
    if sep and key.startswith("engine.") and key not in overridden and "engine" not in overridden:
        name = key[len("engine."):]
        if name in ENGINE_KWARGS or name in ENGINE_SWITCHES or name == "gpu_memory_utilization":
            source = {**ENGINE_KWARGS, **ENGINE_SWITCHES}.get(name, name)
            value = run.meta["engine_kwargs"].get(source)
            return f"{run.directory / 'vllm' / 'meta.json'}: engine_kwargs.{source} is {_shown(value)}: {detail}"
        if name in CLUSTER_KEYS:
            return f"{run.directory / 'config.json'}: {CLUSTER_KEYS[name]}: {detail}"
        if name == "num_gpu_blocks":  # `_recorded_blocks`: meta.json's, else the override
            recorded = run.meta.get("num_gpu_blocks")
            which = ("num_gpu_blocks", recorded) if recorded is not None else (
                "engine_kwargs.num_gpu_blocks_override", run.meta["engine_kwargs"].get("num_gpu_blocks_override"))
            return f"{run.directory / 'vllm' / 'meta.json'}: {which[0]} is {_shown(which[1])}: {detail}"
    if where.startswith("--set "):
        return rest
    return f"{run.directory}: the simulate config made from the recorded run does not load: {rest}"


def _instances(run: RecordedRun) -> list[tuple[int, int, dict]]:
    """(node index, instance index, instance) of every config.json instance that is a JSON object;
    [] for a cluster without the nodes[].instances[] shape (which names no per-instance key)."""
    try:
        return [(n, i, instance) for n, node in enumerate(run.cluster.get("nodes") or [])
                for i, instance in enumerate(node.get("instances") or []) if isinstance(instance, dict)]
    except (AttributeError, TypeError):
        return []


def _check_colocated(run: RecordedRun) -> None:
    """Every instance of config.json is colocated: its `pd_type` is null or absent.

    LLMServingSim's cluster config gives an instance `pd_type` "prefill" or "decode" for
    prefill/decode disaggregation, null (or no key) for one that runs both phases
    (serving/core/config_builder.py, which refuses any other value; its bench/ harness records
    plain vLLM runs, null). A disaggregated instance is not the one vLLM V1 engine that
    `bundle_config` simulates, and which requests it served as prefill or decode is not in the
    recording, so it is refused rather than simulated as colocated.

    Raises:
        ValueError: naming config.json, the instance's key and its pd_type.
    """
    for n, i, instance in _instances(run):
        pd_type = instance.get("pd_type")
        if pd_type is not None:
            kind = (f"a disaggregated {pd_type} instance" if pd_type in ("prefill", "decode")
                    else "LLMServingSim's values are 'prefill', 'decode' or null")
            raise ValueError(f"{run.directory / 'config.json'}: nodes[{n}].instances[{i}].pd_type is {_shown(pd_type)} "
                             f"({kind}); --against-run simulates colocated instances only (pd_type null or absent); "
                             "a prefill/decode cluster is simulated from a config's `cluster:`")


def _cluster_gpus(run: RecordedRun) -> int | None:
    """GPUs of the bundle's cluster (Σ num_npus over every node's instances); None when config.json
    is absent or an instance does not say its num_npus."""
    try:
        return sum(int(i["num_npus"]) for node in run.cluster["nodes"] for i in node["instances"]) or None
    except (KeyError, TypeError, ValueError):
        return None


def _instance(run: RecordedRun) -> dict:
    try:
        instance = run.cluster["nodes"][0]["instances"][0]
    except (KeyError, IndexError, TypeError):
        return {}
    return instance if isinstance(instance, dict) else {}


def _model(name, meta_path: Path) -> str:
    from profiler.model_spec import BUILTIN_MODELS

    candidates = [str(name), str(name).rsplit("/", 1)[-1].lower()] if name else []
    for candidate in candidates:
        if candidate in BUILTIN_MODELS:
            return candidate
    raise ValueError(f"{meta_path}: model {name!r} is not a built-in model (built-in: {', '.join(sorted(BUILTIN_MODELS))}); "
                     "give its config.json with --set model=PATH")


def _device(hardware, config_path: Path, present: bool = True) -> str:
    if hardware in HARDWARE_DEVICES:
        return HARDWARE_DEVICES[hardware]
    if not present:
        raise ValueError(f"{config_path} is missing (the cluster file that names the card, `hardware`); "
                         "name the card with --set device=NAME (a built-in device or a device file)")
    raise ValueError(f"{config_path}: hardware {hardware!r} has no built-in device (known: "
                     f"{', '.join(sorted(HARDWARE_DEVICES))}); name one with --set device=NAME or a device file")


def write_trace(run: RecordedRun, path: Path) -> Path:
    """The run's requests as a canonical trace CSV (arrival_s, prompt_tokens, output_tokens)."""
    frame = run.requests[["arrival_s", "prompt_tokens", "output_tokens"]]
    return write_atomic(path, lambda tmp: frame.to_csv(tmp, index=False, float_format="%.9f"))


def per_request_errors(run: RecordedRun, simulated: pd.DataFrame) -> pd.DataFrame:
    """Per-request signed errors (%) of TTFT, TPOT and E2E, and of TTFT's two engine terms, so a
    report says which is off: `queue_s` (queued_ts to scheduled_ts: waiting for the scheduler to
    take it) and `first_token_after_scheduled_s` (scheduled_ts to first_token_ts: with async
    scheduling the step already in flight, then the prompt's steps). The simulation's request i is
    the trace's row i, i.e. the recording's i-th request by engine arrival; its terms are
    first_scheduled_s − arrival_s and first_token_s − first_scheduled_s (`first_scheduled_s` is
    when vLLM's scheduler decided, as `scheduled_ts`: simulator/replica.py).

    Args:
        simulated: the simulator's requests frame (`simulator.metrics.requests_frame`), request_id
            0..n−1 in trace order.

    Returns:
        one row per metric: its error's P10, P50, P90 over requests and the share within ±10 % / ±25 %.

    Raises:
        ValueError: the simulation has another number of requests than the recording.
    """
    if len(simulated) != len(run.requests):
        raise ValueError(f"the simulation has {len(simulated)} requests, the recording {len(run.requests)}")
    sim = simulated.sort_values("request_id", kind="stable").reset_index(drop=True)
    r = run.requests
    measured_terms = {"queue_s": r["scheduled_s"] - r["arrival_s"],
                      "first_token_after_scheduled_s": r["first_token_s"] - r["scheduled_s"]}
    simulated_terms = {"queue_s": sim["first_scheduled_s"] - sim["arrival_s"],
                       "first_token_after_scheduled_s": sim["first_token_s"] - sim["first_scheduled_s"]}
    rows = []
    for metric in ("ttft_s", "tpot_s", "e2e_s", *measured_terms):
        measured = (measured_terms[metric] if metric in measured_terms else r[metric]).to_numpy(dtype=float)
        predicted = (simulated_terms[metric] if metric in simulated_terms else sim[metric]).to_numpy(dtype=float)
        ok = np.isfinite(measured) & np.isfinite(predicted) & (measured > 0)
        error = 100.0 * (predicted[ok] - measured[ok]) / measured[ok]
        p10, p50, p90 = np.percentile(error, [10, 50, 90]) if error.size else (np.nan,) * 3
        rows.append({"metric": metric, "requests": int(ok.sum()), "err P10 %": p10, "err P50 %": p50,
                     "err P90 %": p90, "within ±10 %": float(np.mean(np.abs(error) <= 10)) if error.size else np.nan,
                     "within ±25 %": float(np.mean(np.abs(error) <= 25)) if error.size else np.nan})
    return pd.DataFrame(rows)


def per_second(arrival_s: np.ndarray, scheduled_s: np.ndarray, completion_s: np.ndarray,
               token_times_s: list | None, horizon_s: float) -> pd.DataFrame:
    """Per-second state of a run, defined the same way for the recording and the simulation:
    at each whole second t, `running` = requests scheduled and not finished, `waiting` = arrived
    and not yet scheduled; `gen_throughput` = output tokens emitted in (t − 1, t] from per-token
    times, NaN without them (the recording has only first and last token times: spreading the
    rest evenly would draw a smooth curve the engine never produced; its own per-second log,
    `RecordedRun.timeseries`, is the measured throughput).

    Returns:
        columns t (1, 2, ..., ceil(horizon_s)), running, waiting, gen_throughput (tokens/s).
    """
    t = np.arange(1, int(math.ceil(horizon_s)) + 1, dtype=float)
    running = ((scheduled_s[None, :] <= t[:, None]) & (completion_s[None, :] > t[:, None])).sum(axis=1)
    waiting = ((arrival_s[None, :] <= t[:, None]) & (scheduled_s[None, :] > t[:, None])).sum(axis=1)
    if token_times_s is None:
        counts = np.full(len(t), np.nan)
    else:
        times = np.concatenate([np.asarray(x, dtype=float) for x in token_times_s]) if len(token_times_s) else np.array([])
        counts = np.histogram(times, bins=np.concatenate([[0.0], t]))[0].astype(float)
    return pd.DataFrame({"t": t, "running": running, "waiting": waiting, "gen_throughput": counts})
