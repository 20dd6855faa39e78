"""Config validation: bad keys and values are errors naming the file, the key and what is valid."""
from __future__ import annotations

import textwrap

import pytest

from experiments.config import ConfigError, SweepConfig, describe_point, load_config


def write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(text))
    return path


BASE = """
trace: {kind: poisson, qps: 2, num_requests: 10}
engine: {scheduler: sarathi, chunk_size: 512}
"""


def error_of(tmp_path, text, overrides=()):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), list(overrides))
    return str(info.value)


def test_variants_are_crossed_and_inherited_chunk_size_dropped_for_vllm(tmp_path):
    path = write(tmp_path, BASE + (
        "variants:\n"
        "  - {engine.scheduler: vllm}\n"
        "  - {engine.scheduler: sarathi, engine.chunk_size: [256, 1024]}\n"))
    _, points = load_config(path)
    labels = [describe_point(SweepConfig.model_validate(p)) for p in points]
    assert labels == ["vllm", "sarathi chunk=256", "sarathi chunk=1024"]
    assert "chunk_size" not in points[0]["engine"]


def test_unknown_key_names_file_key_and_line(tmp_path):
    message = error_of(tmp_path, BASE + "engine2: {}\n")
    assert "c.yaml" in message and "engine2" in message and "unknown key" in message and "line 4" in message


def test_misspelt_engine_key(tmp_path):
    message = error_of(tmp_path, "trace: {kind: poisson, qps: 2}\nengine: {chunk_sise: 256}\n")
    assert "engine.chunk_sise" in message and "unknown key" in message


def test_key_the_scheduler_does_not_use_is_an_error(tmp_path):
    message = error_of(tmp_path, "trace: {kind: poisson, qps: 2}\nengine: {scheduler: vllm, chunk_size: 512}\n")
    assert "engine.chunk_size is not used by scheduler 'vllm'" in message
    message = error_of(tmp_path, BASE + "variants:\n  - {engine.scheduler: vllm, engine.chunk_size: 256}\n")
    assert "variants[0]" in message and "chunk_size" in message


def test_bad_values_say_what_is_valid(tmp_path):
    assert "greater than 0" in error_of(tmp_path, "trace: {kind: poisson, qps: -1}\n")
    assert "'profile', 'file', 'poisson'" in error_of(tmp_path, "trace: {kind: csv, qps: 1}\n")
    message = error_of(tmp_path, "trace: {kind: poisson, qps: 1}\nengine: {scheduler: lightllm}\n")
    assert "valid: faster_transformer, fastgen, orca, sarathi, simple_chunking, vllm, vllm_v1" in message
    assert "e.g. tbt_p99_s" in error_of(tmp_path, BASE + "slo: {tbt_p98_s: 0.1}\n")
    assert "max_num_seqs (600) must be <= chunk_size (512)" in error_of(
        tmp_path, "trace: {kind: poisson, qps: 1}\nengine: {max_num_seqs: 600}\n")


def test_enumerated_engine_values_list_the_valid_ones(tmp_path):
    message = error_of(tmp_path, BASE.replace("chunk_size: 512", "router: nearest"))
    assert "engine.router" in message and "'round_robin', 'least_outstanding', 'random', 'prefix_aware' or 'session_affinity'" in message
    message = error_of(tmp_path, BASE.replace("chunk_size: 512", "acceptance: 1.5"))
    assert "engine.acceptance" in message
    message = error_of(tmp_path, BASE.replace("chunk_size: 512", "long_prefill_token_threshold: 64"))
    assert "not used by scheduler 'sarathi' (only by vllm_v1)" in message


def test_dotted_override(tmp_path):
    base, points = load_config(write(tmp_path, BASE), ["trace.qps=7.5", "engine.chunk_size=1024"])
    assert base.trace.qps == 7.5 and base.engine.chunk_size == 1024 and len(points) == 1
    assert "--set" in error_of(tmp_path, BASE, ["trace.qps"])


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.yaml")
    assert "not valid YAML" in error_of(tmp_path, "trace: {kind: poisson\n")
    assert "top level must be a mapping" in error_of(tmp_path, "- 1\n- 2\n")


# ----- found by a new-user pass -------------------------------------------------------------
def test_booleans_are_not_numbers(tmp_path):
    message = error_of(tmp_path, "trace: {kind: poisson, qps: 2}\nengine: {chunk_size: true}\n")
    assert "chunk_size: expected a number" in message


@pytest.mark.parametrize("extra, expected", [
    ("slo: {tbt_p99_s: true}", "c.yaml: slo (line 2): tbt_p99_s: expected a number, got true"),
    ("goodput: {ttft_s: false}", "c.yaml: goodput (line 2): ttft_s: expected a number, got false"),
    ("search: {qps: [1, true]}", "c.yaml: search (line 2): qps: [1]: expected a number, got true"),
])
def test_booleans_are_not_numbers_inside_mappings_and_lists(tmp_path, extra, expected):
    """YAML `true` inside `slo:` once passed as a 1 s SLO; every numeric key refuses it, naming it."""
    assert error_of(tmp_path, "trace: {kind: poisson, qps: 2}\n" + extra + "\n").endswith("/" + expected)
    message = error_of(tmp_path, "trace: {kind: poisson, qps: 2, prompt_tokens: [10, true]}\n")
    assert "trace (line 1): prompt_tokens: [1]: expected a number, got true" in message


def test_deployment_checked_before_running(tmp_path):
    assert "c.yaml: model (line 4): unknown model 'llama-9-8b'" in error_of(tmp_path, BASE + "model: llama-9-8b\n")
    assert "c.yaml: device (line 4):" in error_of(tmp_path, BASE + "device: tpu-v9\n")
    message = error_of(tmp_path, BASE.replace("chunk_size: 512", "tensor_parallel_size: 3"))
    assert "engine.tensor_parallel_size" in message
    message = error_of(tmp_path, BASE.replace("chunk_size: 512", "max_model_len: 10000000"))
    assert "exceeds llama-3-8b's context of 8192 tokens" in message


def test_binary_and_empty_variant_lists(tmp_path):
    path = tmp_path / "bin.yaml"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(ConfigError, match="not a text"):
        load_config(path)
    assert "empty list gives no points" in error_of(tmp_path, BASE + "variants:\n  - {engine.chunk_size: []}\n")


def test_set_scheduler_drops_keys_only_the_old_scheduler_reads(tmp_path):
    base, points = load_config(write(tmp_path, BASE), ["engine.scheduler=vllm"])
    assert base.engine.scheduler == "vllm" and "chunk_size" not in points[0]["engine"]
    assert "not used by scheduler 'vllm'" in error_of(tmp_path, BASE, ["engine.scheduler=vllm", "engine.chunk_size=64"])


def test_variant_errors_point_at_the_variant_line(tmp_path):
    text = BASE + "variants:\n  - {engine.chunk_size: 256}\n  - {engine.chunk_size: 0}\n"
    assert "variants[1]" in (message := error_of(tmp_path, text)) and "(line 6)" in message


def test_relative_paths_resolve_against_the_config_file(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,10,2\n")
    config = tmp_path / "c.yaml"
    config.write_text("trace: {kind: file, path: data/t.csv}\n")
    monkeypatch.chdir("/")
    base, _ = load_config(config)
    assert base.trace.path == str(tmp_path / "data" / "t.csv")
    monkeypatch.chdir(tmp_path / "data")
    base, _ = load_config(config, ["trace.path=t.csv"])  # --set paths: relative to the working directory
    assert base.trace.path == str(tmp_path / "data" / "t.csv")


def test_profile_cost_model_path_resolves_against_the_config_file(tmp_path):
    from experiments.config import _resolve_paths
    tree = {"cost_model": "profile:prof", "model": "llama-3-8b"}
    _resolve_paths(tree, tmp_path)
    assert tree == {"cost_model": f"profile:{tmp_path / 'prof'}", "model": "llama-3-8b"}
    tree = {"cost_model": "auto"}
    _resolve_paths(tree, tmp_path)
    assert tree == {"cost_model": "auto"}


def test_speculative_settings_checked_before_running(tmp_path):
    spec = BASE.replace("chunk_size: 512", "chunk_size: 512, split_n: 2")
    assert "acceptance must be a probability" in error_of(tmp_path, spec.replace("split_n: 2", "split_n: 2, acceptance: 1.5"))
    assert "acceptance must be a probability" in error_of(tmp_path, spec.replace("split_n: 2", "split_n: 2, acceptance: []"))
    message = error_of(tmp_path, spec.replace("split_n: 2", "split_n: 2, acceptance: [0.5, 0.5, 0.5]"))
    assert "lists 3 per-position probabilities but split_n is 2" in message
    message = error_of(tmp_path, spec.replace("split_n: 2", "split_n: 2, acceptance: {file: missing.csv}"))
    assert "engine.acceptance.file" in message and "missing.csv" in message
    message = error_of(tmp_path, spec.replace("split_n: 2", "split_n: 2, draft: {model: llama-9}"))
    assert "engine.draft.model" in message


def test_search_refuses_a_closed_loop_trace(tmp_path):
    text = ("trace: {kind: closed_loop, clients: 4, num_requests: 20}\n"
            "search: {qps: [1, 8], num_requests: 20, seeds: 1}\n")
    assert "closed-loop trace sets a number of clients" in error_of(tmp_path, text)


# ----- every number finite and in range, the key and line named (issue 14, item 6) ---------
T = "trace: {kind: poisson, qps: 2, num_requests: 10}\n"


@pytest.mark.parametrize("text,expected", [
    (T + "slo: {tbt_p99_s: .nan}\n", "slo.tbt_p99_s (line 2): Input should be a finite number (got nan)"),
    (T + "slo: {tbt_p99_s: -1}\n", "slo (line 2): SLO tbt_p99_s must be a finite number > 0 seconds, got -1.0"),
    (T + "slo: {tbt_p99_s: .inf}\n", "slo.tbt_p99_s (line 2): Input should be a finite number (got inf)"),
    (T + "goodput: {ttft_s: -2}\n", "goodput (line 2): goodput ttft_s must be a finite number > 0 seconds, got -2.0"),
    (T + "goodput: {tpot_s: .nan}\n", "goodput.tpot_s (line 2): Input should be a finite number (got nan)"),
    ("trace: {kind: poisson, qps: 2, seed: -1}\n", "trace.seed (line 1): Input should be greater than or equal to 0 (got -1)"),
    (T + "engine: {seed: 4294967296}\n", "engine.seed (line 2): Input should be less than or equal to 4294967295"),
    (T + "engine: {num_gpu_blocks: 9200000000000000000}\n",
     "engine.num_gpu_blocks (line 2): Input should be less than or equal to 33554432 (got 9200000000000000000)"),
    # llama-3-8b: 2 (K, V) x 32 layers x 8 KV heads x 128 x 1 byte x 16 tokens = 1 MiB a block; 80 GiB / 1 MiB.
    (T + "engine: {num_gpu_blocks: 81921}\n",
     "engine.num_gpu_blocks (line 2): 81921 blocks are more KV than one h100-sxm holds: blocks of 16 tokens of "
     "llama-3-8b take 1,048,576 bytes each even at 1 byte a value, so its 80 GiB hold at most 81,920 (with no weights)"),
    ("trace: {kind: poisson, qps: .nan}\n", "trace.qps (line 1): Input should be a finite number (got nan)"),
    ("trace: {kind: profile, name: sharegpt, qps: .inf}\n", "trace.qps (line 1): Input should be a finite number"),
    ("trace: {kind: poisson, qps: 2000000}\n", "trace.qps (line 1): Input should be less than or equal to 1000000"),
    ("trace: {kind: poisson, qps: 1.0e-300}\n", "trace (line 1): qps 1e-300 is too low for 2048 requests: they "
                                               "would span 2.05e+303 s, more than the 1e9 s (31.7 years)"),
    ("trace: {kind: synthetic, qps: 1, arrival: gamma, burstiness: .nan}\n",
     "trace.burstiness (line 1): Input should be a finite number (got nan)"),
    ("trace: {kind: synthetic, qps: 1, arrival: gamma, burstiness: 0.0001}\n",
     "trace.burstiness (line 1): Input should be greater than or equal to 0.001 (got 0.0001)"),
    ("trace: {kind: closed_loop, clients: 2, think_time_s: -1}\n",
     "trace.think_time_s (line 1): Input should be greater than or equal to 0 (got -1)"),
    ("trace: {kind: closed_loop, clients: 2, think_time_s: .inf}\n", "trace.think_time_s (line 1): Input should be a finite"),
    ("trace: {kind: closed_loop, clients: 0}\n", "trace.clients (line 1): Input should be greater than or equal to 1"),
    ("trace: {kind: file, window_s: [0, .inf]}\n", "trace.window_s.1 (line 1): Input should be a finite number (got inf)"),
    ("trace: {kind: file, window_s: [.nan, 5]}\n", "trace.window_s.0 (line 1): Input should be a finite number (got nan)"),
    ("trace: {kind: file, qps: -3}\n", "trace.qps (line 1): Input should be greater than 0 (got -3)"),
    ("trace: {kind: poisson, qps: 2, num_requests: 100000000000}\n",
     "trace.num_requests (line 1): Input should be less than or equal to 10000000 (got 100000000000)"),
    ("trace: {kind: profile, name: sharegpt, qps: 2, output_tokens: {max: 3000000000}}\n",
     "trace.output_tokens.max (line 1): Input should be less than or equal to 2147483647"),
    (T + "engine: {chunk_size: 100000000000}\n", "engine.chunk_size (line 2): Input should be less than or equal to 16777216"),
    (T + "engine: {scheduler: vllm, max_num_batched_tokens: 0}\n", "engine.max_num_batched_tokens (line 2): Input should be greater"),
    (T + "engine: {replicas: 1000000000}\n", "engine.replicas (line 2): Input should be less than or equal to 10000"),
    (T + "engine: {gpu_memory_utilization: .nan}\n", "engine.gpu_memory_utilization (line 2): Input should be a finite"),
    (T + "engine: {split_n: 2, acceptance: .nan}\n", "engine.acceptance (line 2): acceptance must be a probability"),
    (T + "search: {qps: [1, .inf]}\n", "search.qps.1 (line 2): Input should be a finite number (got inf)"),
    (T + "search: {qps: [4, 1]}\n", "search.qps (line 2): search.qps must be [low, high] with 0 < low < high"),
    (T + "search: {qps: [1, 2000000]}\n", "search.qps (line 2): search.qps high (2e+06) exceeds 1e6 requests/s"),
    (T + "search: {qps: [1.0e-7, 4]}\n", "search (line 2): search.qps low: qps 1e-07 is too low for 2048 requests: "
                                         "they would span 2.05e+10 s"),
    ("trace: {kind: file, window_s: [1.0e+9, 2.0e+9]}\n", "trace.window_s (line 1): window_s starts at 1e+09 s, "
                                                          "after the 1e9 s (31.7 years) a trace may span"),
    (T + "search: {loads: [1, .nan]}\n", "search.loads.1 (line 2): Input should be a finite number (got nan)"),
    (T + "search: {precision: -0.1}\n", "search.precision (line 2): Input should be greater than 0"),
    (T + "search: {num_requests: 100000000000}\n", "search.num_requests (line 2): Input should be less than or equal to 10000000"),
    (T + "search: {}\nfleet: {target_qps: .nan}\n", "fleet.target_qps (line 3): Input should be a finite number"),
    (T + "search: {}\nfleet: {target_qps: 10, gpu_hour_usd: -1}\n", "fleet.gpu_hour_usd (line 3): must be a finite price > 0 in USD per GPU-hour, or a price per device name"),
])
def test_every_number_is_finite_and_in_range_with_its_key_and_line(tmp_path, text, expected):
    assert f"c.yaml: {expected}" in error_of(tmp_path, text)


def test_a_kv_pool_override_the_device_can_hold_is_accepted(tmp_path):
    base, _ = load_config(write(tmp_path, T + "engine: {num_gpu_blocks: 81920}\n"))
    assert base.engine.num_gpu_blocks == 81920
    # Pipeline stages hold a share of the layers: 2 stages of llama-3-8b's 32 hold twice the blocks.
    base, _ = load_config(write(tmp_path, T + "engine: {num_gpu_blocks: 163840, pipeline_parallel_size: 2}\n"))
    assert base.engine.num_gpu_blocks == 163840
    assert "at most 163,840" in error_of(tmp_path, T + "engine: {num_gpu_blocks: 163841, pipeline_parallel_size: 2}\n")


def test_unparseable_values_are_errors_not_tracebacks(tmp_path):
    message = error_of(tmp_path, BASE, ["engine.chunk_size=[1,"])
    assert message.startswith("--set 'engine.chunk_size=[1,': the value is not valid YAML")
    message = error_of(tmp_path, BASE, ["trace.seed=" + "9" * 5000])
    assert message.startswith("--set 'trace.seed=999") and "Exceeds the limit (4300 digits)" in message
    message = error_of(tmp_path, BASE + "engine: {seed: " + "9" * 5000 + "}\n")
    assert "cannot read the YAML: Exceeds the limit (4300 digits) for integer string conversion" in message


def test_a_bad_value_given_with_set_is_named_as_a_set_without_a_file_line(tmp_path):
    assert error_of(tmp_path, BASE, ["trace.qps=.nan"]).endswith("c.yaml: --set trace.qps: Input should be a finite "
                                                                 "number (got nan)")
    assert "c.yaml: --set engine.chunk_sise: unknown key (did you mean chunk_size?); valid keys: scheduler, " \
        "chunk_size," in error_of(tmp_path, BASE, ["engine={chunk_sise: 4}"])
    assert "c.yaml: trace.qps (line 2): Input should be a finite" in error_of(tmp_path, BASE.replace("qps: 2", "qps: .nan"))


def test_no_config_model_lets_nan_or_inf_through():
    # allow_inf_nan=False is set once on _Strict; a model that replaced model_config would lose it.
    import importlib
    import pkgutil

    import experiments.config as config_package
    modules = [importlib.import_module(f"experiments.config.{m.name}") for m in pkgutil.iter_modules(config_package.__path__)]
    models = {m for module in modules for m in vars(module).values()
              if isinstance(m, type) and issubclass(m, config_package._Strict) and m is not config_package._Strict}
    assert len(models) >= 14
    assert [m.__name__ for m in models if m.model_config.get("allow_inf_nan") is not False] == []


def test_measured_cost_model_dirs_are_relative_to_the_config_file(tmp_path):
    """`cost_model: measured:DIR[,DIR]` names folders as paths do: relative to the config's folder."""
    from experiments.config import _resolve_paths

    tree = {"cost_model": "measured:tables/a,/abs/b"}
    _resolve_paths(tree, tmp_path)
    assert tree["cost_model"] == f"measured:{tmp_path / 'tables/a'},/abs/b"
    flat = {"cost_model": "profile:cal"}
    _resolve_paths(flat, tmp_path)
    assert flat["cost_model"] == f"profile:{tmp_path / 'cal'}"


def test_a_length_beyond_the_trace_bound_is_a_config_error_naming_the_key(tmp_path):
    # Once a per-point "ValueError: fixed tokens must be at most 2147483647" naming no key.
    message = error_of(tmp_path, "trace: {kind: poisson, qps: 2,\n  prompt_tokens: 9999999999999}\n")
    assert message.endswith("c.yaml: trace.prompt_tokens (line 2): fixed tokens must be at most 2147483647 tokens "
                            "(the longest length a trace may hold), got 9999999999999")


def test_a_profile_of_another_model_is_refused_when_the_config_loads():
    from pathlib import Path

    root = Path(__file__).parent / "data"
    with pytest.raises(ConfigError) as info:
        load_config(root / "engine" / "tiny_engine.yaml", [f"cost_model=profile:{root / 'profiles' / 'cpu-tiny-llama'}"])
    assert str(info.value) == (f"{root / 'engine' / 'tiny_engine.yaml'}: --set cost_model: "
                               f"{root / 'profiles' / 'cpu-tiny-llama'}: profiled for model 'tiny-llama', "
                               "whose shapes differ from 'tiny'")


@pytest.mark.parametrize("rows, held", [("0.5,-100,10\n1.0,-5,3\n", "0 valid requests"),
                                        ("0.5,100,10\n1.0,-5,3\n", "1 valid request"),
                                        ("0.5,100,10\n0.5,80,3\n", "2 valid requests all at one instant")])
def test_a_file_trace_with_no_rate_to_scale_is_refused_at_load_naming_qps_and_the_file(tmp_path, rows, held):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + rows)
    message = error_of(tmp_path, f"trace:\n  kind: file\n  path: {trace}\n  qps: 4\n")
    assert message.endswith(f"c.yaml: trace.qps (line 4): cannot time-scale the trace file {trace} to a QPS: it "
                            f"holds {held} (after its filters, window_s and max_requests), so its mean rate is "
                            "undefined; give a file with at least two requests at different times, or drop the "
                            "qps to replay it at its own times")
    load_config(write(tmp_path, f"trace:\n  kind: file\n  path: {trace}\n"))  # at its own times: loads


def test_the_calibration_overhead_config_prices_the_device_the_profile_was_measured_on():
    """calibrate's engine-overhead config once named device h100-sxm with a CPU profile (refused
    at load since): it describes the measured host under the key `cpu`, with its measured rates."""
    from pathlib import Path

    from experiments.verification.calibrate import profiled_device

    device = profiled_device(Path(__file__).parent / "data" / "profiles" / "cpu-tiny-llama")
    assert device["name"] == "cpu" and device["memory_gib"] == pytest.approx(23.54016876220703)
    assert device["dense_bf16_tflops"] == pytest.approx(0.06884177276848705)
    assert device["memory_bandwidth_gb_per_s"] == pytest.approx(12.371315722113928)


def test_validation_problems_is_one_line_of_keys_and_messages():
    """The one formatter of pydantic's errors (`layouts_of`, `pool_point`, the xPyD layouts):
    dotted keys, a root key only where asked, pydantic's "Value error, " lead dropped by default."""
    from pydantic import ValidationError

    from experiments.config import EngineConfig, validation_problems

    with pytest.raises(ValidationError) as fields:
        EngineConfig(scheduler="sarathi", chunk_size=0, bogus=1)
    with pytest.raises(ValidationError) as whole:
        EngineConfig(scheduler="sarathi", max_num_batched_tokens=8)
    assert validation_problems(fields.value) == ("chunk_size: Input should be greater than or equal to 1; "
                                                 "bogus: Extra inputs are not permitted")
    assert validation_problems(fields.value, keyed=False) == ("Input should be greater than or equal to 1; "
                                                              "Extra inputs are not permitted")
    used = "engine.max_num_batched_tokens is not used by scheduler 'sarathi' (only by vllm_v1, vllm, orca, faster_transformer)"
    assert validation_problems(whole.value) == used
    assert validation_problems(whole.value, root_key="engine") == f"engine: {used}"
    assert validation_problems(whole.value, root_key="engine", message=lambda e: e["msg"]) == (
        f"engine: Value error, {used}")  # a caller's own message, as it gives it


@pytest.mark.parametrize("value, shown", [("{min: 5}", "{'min': 5}"), ("[vllm]", "['vllm']")])
def test_a_scheduler_that_is_a_mapping_or_list_in_the_file_is_a_config_error(tmp_path, value, shown):
    # Once `TypeError: unhashable type` from the scheduler-keys lookup (issue 30 item 6); --set and
    # a variant already gave a clean error, the file did not.
    message = error_of(tmp_path, f"trace: {{kind: poisson, qps: 2, num_requests: 10}}\nengine: {{scheduler: {value}}}\n")
    assert message.endswith(f"c.yaml: engine.scheduler (line 2): must be the name of one scheduler (faster_transformer, "
                            f"fastgen, orca, sarathi, simple_chunking, vllm, vllm_v1), got {shown}")
    by_set = error_of(tmp_path, BASE, [f"engine.scheduler={value}"])  # a --set mapping merges as dotted keys
    assert by_set == "--set engine.scheduler.min: engine.scheduler.min: scheduler is not a mapping" if "min" in value \
        else by_set.endswith(f"c.yaml: --set engine.scheduler: must be the name of one scheduler (faster_transformer, "
                             f"fastgen, orca, sarathi, simple_chunking, vllm, vllm_v1), got {shown}")


MOE = """
model: qwen3-30b-a3b
trace: {kind: poisson, qps: 2, num_requests: 10}
engine: {scheduler: vllm_v1, chunk_size: 2048, expert_routing_skew: 1.0}
"""


def test_a_routing_skew_the_measured_moe_tables_lack_is_a_config_error_at_load(tmp_path):
    # Once accepted at load (the docs allow 0-4) and failed per point at run time (issue 30 item 8).
    routings = "(0 (balanced), 1.01 (power_law_1.01), 1.2 (power_law_1.2))"
    assert error_of(tmp_path, MOE).endswith(
        f"c.yaml: engine.expert_routing_skew (line 4): 1 is no routing of the measured MoE tables that price this "
        f"point's experts {routings}; choose one of them, or cost_model: roofline for another exponent")
    load_config(write(tmp_path, MOE), ["engine.expert_routing_skew=1.2"])  # a measured routing
    load_config(write(tmp_path, MOE), ["cost_model=roofline"])  # the roofline takes any exponent
    pools = "cluster: {prefill: {}, decode: {engine: {expert_routing_skew: 2.5}}}\n"
    assert "c.yaml: cluster.decode.engine.expert_routing_skew" in error_of(
        tmp_path, MOE.replace("expert_routing_skew: 1.0", "expert_routing_skew: 0") + pools)
