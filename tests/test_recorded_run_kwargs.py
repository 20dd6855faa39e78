"""`verify --against-run` handles every engine_kwargs key of a bundle's vllm/meta.json: modelled,
known timing-free, or refused naming the file, key and value (recheck n02); a config.json
instance's `tp_size` other than the engine's TP degree is refused (recheck v17)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.verification.recorded_run import (MODELLED_KWARGS, TIMING_FREE_KWARGS, bundle_config,
                                                   read_recorded_run)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "validation" / "llmservingsim"
KWARGS = {"tensor_parallel_size": 1, "data_parallel_size": 1, "max_num_seqs": 128, "max_num_batched_tokens": 2048,
          "seed": 42}
REQUEST = {"request_id": "r0", "input_toks": 100, "output_toks": 11, "arrival_time": 1.7e9, "queued_ts": 1000.0,
           "scheduled_ts": 1000.0, "first_token_ts": 1000.5, "last_token_ts": 1001.5}
SUPPORTED = ("supported engine_kwargs: async_scheduling, block_size, data_parallel_size, dtype, enable_chunked_prefill, "
             "enable_expert_parallel, enable_prefix_caching, gpu_memory_utilization, kv_cache_dtype, max_model_len, "
             "max_num_batched_tokens, max_num_seqs, model, num_gpu_blocks_override, pipeline_parallel_size, "
             "quantization, seed, tensor_parallel_size (and, not affecting timing, "
             "disable_log_requests, disable_log_stats, download_dir, enable_log_requests, served_model_name, "
             "trust_remote_code; speculative_config null)")


def _bundle(tmp_path: Path, extra: dict, instance: dict | None = None) -> Path:
    (tmp_path / "vllm").mkdir(parents=True)
    (tmp_path / "vllm" / "requests.jsonl").write_text(json.dumps(REQUEST) + "\n")
    meta = {"model": "Qwen/Qwen3-32B", "vllm_version": "0.19.0", "engine_kwargs": {**KWARGS, **extra}}
    (tmp_path / "vllm" / "meta.json").write_text(json.dumps(meta))
    instance = {"hardware": "RTXPRO6000", "npu_mem": {"mem_util": 0.9}, "num_npus": 1, **(instance or {})}
    (tmp_path / "config.json").write_text(json.dumps({"nodes": [{"instances": [instance]}]}))
    return tmp_path


def _engine(tmp_path: Path, extra: dict, instance: dict | None = None) -> dict:
    return bundle_config(read_recorded_run(_bundle(tmp_path, extra, instance)), tmp_path / "t.csv")["engine"]


def _refusal(tmp_path: Path, extra: dict, instance: dict | None = None) -> str:
    with pytest.raises(ValueError) as info:
        _engine(tmp_path, extra, instance)
    return str(info.value)


@pytest.mark.parametrize("key, value, said, why", [
    ("speculative_config", {"method": "ngram", "num_speculative_tokens": 3},
     "{'method': 'ngram', 'num_speculative_tok... (48 characters)",
     "speculative decoding's acceptance is not in the recording: simulate it from a config with engine.split_n, "
     "engine.draft and engine.acceptance"),
    ("foo_bar", 1, "1",
     "--against-run does not model it (simulating vLLM's default in its place would be a silent guess)"),
    ("enforce_eager", True, "True",
     "--against-run does not model it (simulating vLLM's default in its place would be a silent guess)"),
])
def test_an_engine_argument_the_simulator_does_not_model_is_refused(tmp_path, key, value, said, why):
    meta = tmp_path / "vllm" / "meta.json"
    assert _refusal(tmp_path, {key: value}) == f"{meta}: engine_kwargs.{key} is {said}: {why}; {SUPPORTED}"


def test_prefix_caching_maps_to_the_engine_key_of_that_name(tmp_path):
    assert _engine(tmp_path / "off", {"enable_prefix_caching": False})["enable_prefix_caching"] is False
    assert _engine(tmp_path / "on", {"enable_prefix_caching": True})["enable_prefix_caching"] is True
    assert "enable_prefix_caching" not in _engine(tmp_path / "null", {"enable_prefix_caching": None})
    meta = tmp_path / "str" / "vllm" / "meta.json"
    assert _refusal(tmp_path / "str", {"enable_prefix_caching": "no"}) == (
        f"{meta}: engine_kwargs.enable_prefix_caching is 'no'; expected true, false or null")


def test_dtypes_and_switches_map_or_are_refused(tmp_path):
    assert _engine(tmp_path / "a", {"dtype": "bfloat16", "kv_cache_dtype": "auto", "block_size": 32,
                                    "enable_chunked_prefill": True, "speculative_config": None,
                                    "disable_log_stats": True}) == {
        "scheduler": "vllm_v1", "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "num_gpus": 1,
        "max_num_seqs": 128, "chunk_size": 2048, "seed": 42, "block_size": 32, "gpu_memory_utilization": 0.9}
    assert _engine(tmp_path / "b", {"kv_cache_dtype": "fp8_e5m2"})["kv_cache_dtype"] == "fp8"
    # vLLM's --quantization is engine.quantization (issue 32); a method the tool does not know is refused.
    assert _engine(tmp_path / "q", {"quantization": "fp8"})["quantization"] == "fp8"
    meta = tmp_path / "q2" / "vllm" / "meta.json"
    assert _refusal(tmp_path / "q2", {"quantization": "bitsandbytes"}).startswith(
        f"{meta}: engine_kwargs.quantization is 'bitsandbytes'; expected null or one of fp8, fbgemm_fp8")
    for name, key, value, expected in (
            ("c", "dtype", "float16", "bfloat16 (the simulator prices bf16 weights and activations; 'auto' is the "
                                      "checkpoint's dtype, which the recording does not say)"),
            ("d", "kv_cache_dtype", "fp8_inc", "one of auto, bfloat16, bf16, fp8, fp8_e4m3, fp8_e5m2"),
            ("e", "enable_chunked_prefill", False, "true or null (the simulated vllm_v1 scheduler chunks long "
                                                   "prefills as vLLM V1 does by default)")):
        meta = tmp_path / name / "vllm" / "meta.json"
        assert _refusal(tmp_path / name, {key: value}) == f"{meta}: engine_kwargs.{key} is {value!r}; expected {expected}"


def test_engine_kwargs_model_must_be_meta_json_model(tmp_path):
    meta = tmp_path / "vllm" / "meta.json"
    assert _refusal(tmp_path, {"model": "Qwen/Qwen3-8B"}) == (
        f"{meta}: engine_kwargs.model is 'Qwen/Qwen3-8B' but model is 'Qwen/Qwen3-32B'; a recording is of one model")


def test_instance_tp_size_contradicting_meta_json_is_refused_naming_both_files(tmp_path):
    bundle = tmp_path / "b"
    assert _refusal(bundle, {}, {"tp_size": 4}) == (
        f"{bundle / 'config.json'}: nodes[0].instances[0].tp_size is 4 but {bundle / 'vllm' / 'meta.json'}: "
        "engine_kwargs.tensor_parallel_size is 1; the recording must say one TP degree")
    assert _engine(tmp_path / "same", {}, {"tp_size": 1})["tensor_parallel_size"] == 1


def test_every_engine_argument_of_the_shipped_bundles_is_handled():
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent (the recorded runs of ../shared/validation)")
    bundles = sorted(p for p in SHARED.iterdir() if (p / "vllm" / "meta.json").is_file())
    assert [b.name for b in bundles] == ["RTXPRO6000_Qwen3-30B-A3B_dp2ep2", "RTXPRO6000_Qwen3-32B_tp2"]
    for bundle in bundles:
        kwargs = json.loads((bundle / "vllm" / "meta.json").read_text())["engine_kwargs"]
        assert set(kwargs) <= MODELLED_KWARGS and not set(kwargs) & TIMING_FREE_KWARGS
        # The same simulate config as before the check (so BENCHMARKS.md's errors stand).
        engine = bundle_config(read_recorded_run(bundle), Path("t.csv"))["engine"]
        assert engine == {"scheduler": "vllm_v1", "tensor_parallel_size": 2 if "tp2" in bundle.name else 1,
                          "pipeline_parallel_size": 1, "num_gpus": 2, "max_num_seqs": 128, "chunk_size": 2048,
                          "seed": 42, "gpu_memory_utilization": 0.9,
                          **({"data_parallel_size": 2, "enable_expert_parallel": True} if "dp2" in bundle.name else {})}


def test_a_mapped_kwarg_the_config_refuses_is_said_against_meta_json(tmp_path):
    from typer.testing import CliRunner

    from experiments.cli.main import app

    bundle = _bundle(tmp_path / "bundle", {"block_size": 512})
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["verify", "--against-run", str(bundle), "--out", str(out),
                                      "--set", "cost_model=roofline"])
    assert result.exit_code != 0
    assert (f"error: {bundle / 'vllm' / 'meta.json'}: engine_kwargs.block_size is 512: Input should be less than or "
            "equal to 256 (got 512)") in " ".join(result.output.split())
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == []


def test_async_scheduling_follows_the_recorded_vllm_version_or_engine_kwargs(tmp_path):
    # vLLM turned async scheduling on by default in 0.14: a 0.19 run takes the simulator's default
    # (on for vllm_v1), a 0.12 run is synchronous, and engine_kwargs.async_scheduling says it outright.
    assert "async_scheduling" not in _engine(tmp_path / "a", {})
    meta = _bundle(tmp_path / "b", {}) / "vllm" / "meta.json"
    data = json.loads(meta.read_text())
    data["vllm_version"] = "0.12.0"
    meta.write_text(json.dumps(data))
    config = bundle_config(read_recorded_run(tmp_path / "b"), tmp_path / "t.csv")
    assert config["engine"]["async_scheduling"] is False
    assert config["frontend"] == {"enabled": False}  # engine-clock arrivals and TTFT: no front end
    assert _engine(tmp_path / "c", {"async_scheduling": False})["async_scheduling"] is False
    said = _refusal(tmp_path / "d", {"async_scheduling": "yes"})
    assert "meta.json: engine_kwargs.async_scheduling is 'yes'; expected true, false or null" in said
