"""Quantised serving (issue 32): quantization_config read as vLLM 0.19 reads it, bytes per weight
and per KV element, the KV pool they leave, the FP8 measured tables priced, and every format the
tool cannot price refused with the field named."""
import json
from dataclasses import replace

import pytest

from experiments.config import SweepConfig
from experiments.planning.vllm_flags import vllm_serve_command
from profiler import get_device_spec, get_model_spec
from profiler.measured.shipped import build_measured
from profiler.memory import vllm_kv_pool
from profiler.quantization import (WeightFormat, kernel_for, kv_cache_dtype_bytes, online_format,
                                   read_quantization_config)
from profiler.roofline import RooflineCostModel

# RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8 config.json's quantization_config (compressed-tensors,
# per-tensor static FP8 weights and activations), abridged to the keys vLLM reads.
RED_HAT_FP8 = {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
               "config_groups": {"group_0": {
                   "targets": ["Linear"],
                   "weights": {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True, "dynamic": False},
                   "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True,
                                         "dynamic": False}}}}
QWEN3_FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False}
W4A16 = {"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {
    "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
                                       "symmetric": True}, "input_activations": None}}}


def write_config(tmp_path, name: str, quantization: dict | None) -> str:
    """Llama-3.1-70B's config.json (meta-llama/Llama-3.1-70B) with `quantization`."""
    config = {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
              "num_key_value_heads": 8, "num_hidden_layers": 80, "vocab_size": 128256,
              "max_position_embeddings": 131072, "tie_word_embeddings": False}
    if quantization is not None:
        config["quantization_config"] = quantization
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder / "config.json")


@pytest.mark.parametrize("config, kernel, bits, bytes_per_param", [
    (RED_HAT_FP8, "fp8", 8, 1.0),
    (QWEN3_FP8, "fp8_block", 8, 1 + 4 / 128 ** 2),             # one fp32 scale per 128 x 128 block
    ({"quant_method": "fbgemm_fp8"}, "fp8", 8, 1.0),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8", 8, 1.0),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "weight_only", 4, 0.5 + 1 / 16),  # fp8 scale per 16
    (AWQ, "weight_only", 4, 0.5 + (2 + 0.5) / 128),             # fp16 scale + 4-bit zero per 128
    (GPTQ, "weight_only", 4, 0.5 + 2 / 128),
    ({**GPTQ, "bits": 8}, "weight_only", 8, 1 + 2 / 128),
    ({**GPTQ, "group_size": -1}, "weight_only", 4, 0.5),         # channel-wise: scales < 0.1 %, not counted
    (W4A16, "weight_only", 4, 0.5 + 2 / 128),
])
def test_each_method_reads_to_its_kernel_and_bytes_per_weight(config, kernel, bits, bytes_per_param):
    fmt = read_quantization_config(config, "m/config.json")
    assert (fmt.kernel, fmt.weight_bits) == (kernel, bits)
    assert fmt.bytes_per_param == pytest.approx(bytes_per_param, rel=1e-12)
    assert fmt.source == "m/config.json quantization_config"


@pytest.mark.parametrize("config, field", [
    ({"quant_method": "bitsandbytes"}, r"quantization_config\.quant_method 'bitsandbytes' is not a method"),
    ({"bits": 4}, r"quant_method None"),
    ({**AWQ, "group_size": 256}, r"quantization_config\.group_size 256: vLLM's Marlin kernels take group sizes -1, 32, 64, 128"),
    ({**GPTQ, "sym": False}, r"quantization_config\.sym False"),
    ({**GPTQ, "bits": 3}, r"quantization_config\.bits 3"),
    ({**QWEN3_FP8, "weight_block_size": [64, 64]}, r"weight_block_size \[64, 64\]"),
    ({**QWEN3_FP8, "ignored_layers": ["model.layers.0.mlp.down_proj"]}, r"ignored_layers: layers left unquantised"),
    ({**RED_HAT_FP8, "ignore": ["lm_head", "re:.*mlp.down_proj"]}, r"ignore: layers left unquantised"),
    ({**W4A16, "config_groups": {"group_0": {**W4A16["config_groups"]["group_0"],
                                             "input_activations": {"num_bits": 8, "type": "int"}}}},
     r"integer W4A8 \(INT8 activations\) is not priced"),
    ({"quant_method": "modelopt", "quant_algo": "INT4_AWQ"}, r"quant_algo 'INT4_AWQ'"),
])
def test_formats_the_tool_cannot_price_are_refused_naming_the_field(config, field):
    with pytest.raises(ValueError, match=r"^m/config\.json: .*" + field):
        read_quantization_config(config, "m/config.json")


def test_mixed_schemes_in_one_checkpoint_are_refused():
    mixed = {**RED_HAT_FP8, "config_groups": {"attention": RED_HAT_FP8["config_groups"]["group_0"],
                                              "mlp": W4A16["config_groups"]["group_0"]}}
    with pytest.raises(ValueError, match=r"config_groups: several schemes .*mixed per-layer formats are not priced"):
        read_quantization_config(mixed, "m/config.json")


def test_a_quantised_config_json_prices_its_weights_not_bf16(tmp_path):
    bf16 = get_model_spec(write_config(tmp_path, "bf16", None))
    fp8 = get_model_spec(write_config(tmp_path, "fp8", RED_HAT_FP8))
    awq = get_model_spec(write_config(tmp_path, "awq", AWQ))
    assert bf16.quantization is None and fp8.quantization.kernel == "fp8" and awq.quantization.group_size == 128
    assert fp8.num_params == bf16.num_params == 70_553_706_496  # the count does not change, the bytes do
    # Llama-3.1-70B: 80 layers × (8192 × 10240 + 8192² + 8192 × 57344 + 28672 × 8192) = 68,451,041,280
    # linear weights; the other 2,102,665,216 (embedding, LM head, norms) stay BF16.
    assert fp8.linear_params() == 68_451_041_280
    assert bf16.weight_bytes(2) == 141_107_412_992
    assert fp8.weight_bytes(2) == 68_451_041_280 + 2 * 2_102_665_216 == 72_656_371_712
    assert awq.weight_bytes(2) == 2 * 2_102_665_216 + 68_451_041_280 * 133 // 256  # 0.51953125 B a weight
    with pytest.raises(ValueError, match=r"awq.*config\.json: quantization_config\.group_size 256"):
        get_model_spec(write_config(tmp_path, "awq256", {**AWQ, "group_size": 256}))


def test_builtin_fp8_variants_and_engine_quantization():
    fp8 = get_model_spec("llama-3.1-70b-fp8")
    assert fp8.quantization.kernel == "fp8" and fp8.weight_bytes(2) == 72_656_371_712
    assert get_model_spec("qwen3-32b-fp8").quantization.kernel == "fp8_block"
    online = get_model_spec("llama-3.1-70b").served("fp8")
    assert online.quantization == online_format("fp8") and online.weight_bytes(2) == fp8.weight_bytes(2)
    assert get_model_spec("llama-3.1-70b").served(None).quantization is None
    assert fp8.served("compressed-tensors") is fp8
    with pytest.raises(ValueError, match="engine.quantization 'awq' needs a checkpoint quantised with it"):
        get_model_spec("llama-3.1-70b").served("awq")
    with pytest.raises(ValueError, match="does not match the checkpoint's quant_method 'fp8'"):
        get_model_spec("qwen3-32b-fp8").served("gptq")
    assert get_model_spec("qwen3-235b-a22b").served("fp8").quantization.kernel == "fp8"  # FP8 experts (fused-MoE fp8 rows)


def test_kv_bytes_per_token_per_format():
    model = get_model_spec("llama-3.1-70b")
    # 2 (K, V) × 80 layers × 8 KV heads × 128 × bytes: bf16 327,680 B, fp8 half; TP 2 splits the KV heads.
    assert model.kv_bytes_per_token(kv_cache_dtype_bytes("auto")) == 327_680
    assert model.kv_bytes_per_token(kv_cache_dtype_bytes("bf16")) == 327_680
    for name in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        assert model.kv_bytes_per_token(kv_cache_dtype_bytes(name, get_device_spec("h100-sxm"))) == 163_840
    assert model.kv_bytes_per_token(1, 2) == 81_920
    with pytest.raises(ValueError, match="engine.kv_cache_dtype 'fp8_inc' is unknown; valid: auto, bf16, bfloat16, fp8"):
        kv_cache_dtype_bytes("fp8_inc")
    with pytest.raises(ValueError, match="engine.kv_cache_dtype 'fp8': device 'a100-80gb' has no FP8 support"):
        kv_cache_dtype_bytes("fp8", get_device_spec("a100-80gb"))


def test_hand_worked_pool_of_llama_3_1_70b_fp8_on_one_h100():
    # Llama-3.1-70B FP8 on one H100 (79.19 GiB CUDA-visible) at gpu_memory_utilization 0.9:
    # weights 72,656,371,712 B + rotary cache 131,072 × 128 × 2 = 33,554,432 B = 67.70 GiB of the
    # 71.27 GiB requested; what the profile run and non-torch memory leave is the same for either KV
    # dtype, and a 16-token block is 16 × 327,680 = 5 MiB in BF16, 2.5 MiB in FP8: twice the blocks.
    model, device = get_model_spec("llama-3.1-70b-fp8"), get_device_spec("h100-sxm")
    pools = [vllm_kv_pool(model, device, gpu_memory_utilization=0.9, block_size=16, max_num_batched_tokens=8192,
                          max_num_seqs=256, kv_dtype_bytes=kv) for kv in (2, 1)]
    bf16, fp8 = pools
    assert bf16.weights_bytes == fp8.weights_bytes == 72_656_371_712 + 33_554_432
    assert (bf16.block_bytes, fp8.block_bytes) == (5_242_880, 2_621_440)
    assert bf16.available_bytes == fp8.available_bytes
    assert (bf16.num_blocks, fp8.num_blocks) == (bf16.available_bytes // 5_242_880, fp8.available_bytes // 2_621_440)
    assert fp8.num_blocks in (2 * bf16.num_blocks, 2 * bf16.num_blocks + 1)
    # BF16 weights (141 GB) do not fit one H100 at all.
    bf16_weights = vllm_kv_pool(get_model_spec("llama-3.1-70b"), device, gpu_memory_utilization=0.9, block_size=16,
                                max_num_batched_tokens=8192, max_num_seqs=256)
    assert bf16_weights.available_bytes < 0


def test_fp8_gemms_and_fp8_kv_decodes_come_from_the_measured_fp8_rows():
    h100 = get_device_spec("h100-sxm")
    bf16 = build_measured("auto", get_model_spec("llama-3.1-70b"), h100, 4)
    fp8 = build_measured("auto", get_model_spec("llama-3.1-70b-fp8"), h100, 4, kv_dtype_bytes=1)
    block = build_measured("auto", get_model_spec("qwen3-32b-fp8"), h100, 2)
    parts = fp8.describe()["parts"]
    assert parts["gate_up_proj"].endswith(": gemm_fp8 (m, 14336, 8192)")
    assert parts["lm_head"].split(": ")[1].startswith("gemm (m,")  # the LM head stays BF16
    assert "decode_attention_fp8_kv at heads 16/2" in parts["decode_attention_fp8_kv"]
    # Block FP8: graph-captured steps (≤ 512 tokens here) from the graph-timed per-tensor rows, larger
    # ones from the eager-timed block rows (AIConfigurator times fp8_block without a CUDA graph).
    qkv = block.describe()["parts"]["qkv_proj"]
    assert "gemm_fp8 (m, 5120, 5120) up to 512 tokens (graph-captured)" in qkv and "gemm_fp8_block (m, 5120, 5120) above" in qkv
    per_tensor = build_measured("auto", get_model_spec("qwen3-32b").served("fp8"), h100, 2)
    assert block._gemm["qkv_proj"](64) == per_tensor._gemm["qkv_proj"](64)
    assert block._gemm["qkv_proj"](2048)[0] > per_tensor._gemm["qkv_proj"](2048)[0]
    assert "weights compressed-tensors W8A8 FP8; fp8 KV cache" in fp8.describe()["label"]
    # A decode step of 32 at TP 4 streams 17.1 GB of BF16 layer weights per rank, half that in FP8:
    # the FP8 GEMMs are faster by well over a quarter (measured: 0.60 of BF16 at m = 32).
    ratio = fp8._gemm["gate_up_proj"](32)[0] / bf16._gemm["gate_up_proj"](32)[0]
    assert 0.4 < ratio < 0.75
    # An on-grid measured row is returned as measured: TP 8's o_proj is (k 1024 → n 8192), measured
    # in h100_sxm's gemm_fp8 at m = 32.
    tp8 = build_measured("auto", get_model_spec("llama-3.1-70b-fp8"), h100, 8)
    table = tp8.sources[0].tables["gemm_fp8"]
    row = table[(table["m"] == 32) & (table["n"] == 8192) & (table["k"] == 1024)]
    assert len(row) == 1
    assert tp8._gemm["o_proj"](32) == (pytest.approx(float(row["time_s"].iloc[0]), rel=1e-9), False)


def test_weight_only_and_no_fp8_cards_are_priced_by_the_roofline_and_labelled(tmp_path):
    awq = get_model_spec(write_config(tmp_path, "awq", AWQ))
    model = build_measured("auto", awq, get_device_spec("h100-sxm"), 2)
    assert "awq W4A16 g128 (Marlin weight-only, roofline)" in model.describe()["parts"]["qkv_proj"]
    assert "qkv_proj" in model.describe()["roofline_parts"]
    # On an A100 (no FP8 tensor cores) vLLM runs FP8 checkpoints as FP8 Marlin weight-only.
    a100 = get_device_spec("a100-80gb")
    assert kernel_for(get_model_spec("llama-3.1-70b-fp8").quantization, a100) == "weight_only"
    assert "FP8 Marlin weight-only" in build_measured("auto", get_model_spec("llama-3.1-70b-fp8"), a100, 4).describe()["label"]
    # The roofline: W4A16 decode GEMMs read a quarter of the BF16 weight bytes.
    h100 = get_device_spec("h100-sxm")
    bf16 = RooflineCostModel(get_model_spec("llama-3.1-70b"), h100, tensor_parallel_size=2)
    w4 = RooflineCostModel(awq, h100, tensor_parallel_size=2)
    assert w4._token_parts(1)[0] < 0.3 * bf16._token_parts(1)[0]
    assert w4._seq_parts(1) == bf16._seq_parts(1)  # LM head, gather and sampler unchanged
    nvfp4 = WeightFormat("modelopt", "weight_only", 4, 16, 1.0, source="x/config.json quantization_config")
    with pytest.raises(ValueError, match="NVFP4 on b200 runs W4A4 FP4 tensor-core GEMMs"):
        kernel_for(nvfp4, get_device_spec("b200"))


def _point(**engine) -> dict:
    return {"model": "llama-3.1-70b", "device": "h100-sxm", "trace": {"kind": "poisson", "qps": 1},
            "engine": {"scheduler": "vllm_v1", "chunk_size": 2048, "max_num_seqs": 64, "tensor_parallel_size": 4, **engine}}


def test_engine_keys_and_their_errors():
    with pytest.raises(ValueError, match="engine.dtype is the activations' dtype.*engine.quantization: fp8"):
        SweepConfig.model_validate(_point(dtype="fp8"))
    with pytest.raises(ValueError, match="engine.quantization: .*'awq' needs a checkpoint quantised with it"):
        SweepConfig.model_validate(_point(quantization="awq"))
    with pytest.raises(ValueError, match="quantization"):
        SweepConfig.model_validate(_point(quantization="int3"))
    with pytest.raises(ValueError, match="device 'a100-80gb' has no FP8 support"):
        SweepConfig.model_validate({**_point(kv_cache_dtype="fp8"), "device": "a100-80gb"})
    point = SweepConfig.model_validate(_point(quantization="fp8", kv_cache_dtype="fp8_e4m3"))
    command = vllm_serve_command(point)
    assert "--quantization fp8 --kv-cache-dtype fp8_e4m3" in command and command.startswith("vllm serve meta-llama/Llama-3.1-70B ")
    assert "--quantization" not in vllm_serve_command(SweepConfig.model_validate({**_point(), "model": "llama-3.1-70b-fp8"}))


def test_auto_kv_cache_takes_a_modelopt_checkpoints_fp8_kv(tmp_path):
    # nvidia ModelOpt FP8 exports name their KV quantisation; vLLM resolves --kv-cache-dtype auto to it
    # (vllm/utils/torch_utils.py resolve_kv_cache_dtype_string), so the default pool is an FP8 one.
    from experiments.deployment import build_scheduler_config, kv_bytes_per_element
    from profiler.quantization import resolved_kv_cache_dtype

    modelopt = {"quant_method": "modelopt", "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}
    fmt = read_quantization_config(modelopt, "m/config.json")
    assert (fmt.kernel, fmt.kv_cache_dtype) == ("fp8", "fp8")
    assert read_quantization_config(RED_HAT_FP8, "m/config.json").kv_cache_dtype is None  # only ModelOpt's is read
    assert [resolved_kv_cache_dtype(kv, fmt) for kv in ("auto", "bf16", "bfloat16", "fp8_e5m2")] == [
        "fp8", "fp8", "bfloat16", "fp8_e5m2"]
    with pytest.raises(ValueError, match=r"kv_cache_quant_algo 'NVFP4': an FP8 KV cache is priced"):
        read_quantization_config({**modelopt, "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "NVFP4"}}, "m")
    path = write_config(tmp_path, "modelopt", modelopt)
    default = SweepConfig.model_validate({**_point(), "model": path})
    pinned = SweepConfig.model_validate({**_point(kv_cache_dtype="bfloat16"), "model": path})
    assert (kv_bytes_per_element(default), kv_bytes_per_element(pinned)) == (1, 2)
    blocks = build_scheduler_config(default).num_gpu_blocks, build_scheduler_config(pinned).num_gpu_blocks
    assert blocks[0] in (2 * blocks[1] + 1, 2 * blocks[1] + 2)  # vllm_v1 keeps one null block of each pool
    assert "--kv-cache-dtype bfloat16" in vllm_serve_command(pinned)
    with pytest.raises(ValueError, match="engine.kv_cache_dtype 'fp8': device 'a100-80gb' has no FP8 support"):
        SweepConfig.model_validate({**_point(), "model": path, "device": "a100-80gb"})


def test_fp8_mixture_of_experts_weights_tables_and_block_shapes():
    from profiler.memory import weights_memory_bytes
    from profiler.moe_cost import build_moe_cost_model
    from profiler.moe_memory import weight_params_per_rank

    fp8, bf16 = get_model_spec("qwen3-235b-a22b-fp8"), get_model_spec("qwen3-235b-a22b")
    assert fp8.num_params == bf16.num_params == 235_093_634_560
    # Quantised: 94 × 128 experts × 3 × 4096 × 1536 = 227,096,395,776 expert weights and 94 × 71,303,168
    # attention-linear weights; the router, embedding, LM head and norms stay BF16.
    assert fp8.expert_params() == 227_096_395_776 and fp8.linear_params() == 227_096_395_776 + 6_702_497_792
    # One of 8 GPUs (MoE TP 8): 29,386,704,320 weights, of them 29,224,861,696 FP8 at 1 + 4 / 128² bytes
    # (+ 7,134,976 B of block scales), 161,842,624 BF16, + the rotary cache 40960 × 128 × 2.
    assert weight_params_per_rank(fp8, 8) == 29_386_704_320
    assert weights_memory_bytes(fp8, 8) == 161_842_624 * 2 + 29_224_861_696 + 7_134_976 + 10_485_760
    assert weights_memory_bytes(bf16, 8) == 29_386_704_320 * 2 + 10_485_760
    h100 = get_device_spec("h100-sxm")
    cost = build_moe_cost_model("auto", fp8, h100, 4)
    assert "moe, FP8 experts (hidden 4096, width 1536, top-8 of 128, moe_tp 4" in cost.describe()["parts"]["moe_experts"]
    ep = build_moe_cost_model("auto", fp8, h100, 8, enable_expert_parallel=True)
    assert "moe_tp 1, moe_ep 8" in ep.describe()["parts"]["moe_experts"]
    slower = build_moe_cost_model("auto", bf16, h100, 4)
    assert cost.predict_step_s([1] * 32, [1000] * 32, [False] * 32) < 0.8 * slower.predict_step_s([1] * 32, [1000] * 32, [False] * 32)
    # vLLM refuses block-FP8 experts whose per-rank width is not a multiple of 128 (1536 / 8 = 192).
    with pytest.raises(ValueError, match=r"engine.tensor_parallel_size: .*expert width 192, not multiples of the 128"):
        SweepConfig.model_validate({**_point(tensor_parallel_size=8), "model": "qwen3-235b-a22b-fp8"})
    SweepConfig.model_validate({**_point(tensor_parallel_size=8, enable_expert_parallel=True), "model": "qwen3-235b-a22b-fp8"})
    awq_moe = read_quantization_config({"quant_method": "awq", "bits": 4, "group_size": 128}, "m/config.json")
    with pytest.raises(ValueError, match="quantised mixture-of-experts weights .* are not priced yet"):
        replace(bf16, quantization=awq_moe)


def test_block_fp8_gemms_interpolate_within_the_scale_alignment_class():
    """Hopper's block-FP8 rows step up when m is not a multiple of 4 (DeepGEMM's TMA-aligned scales,
    profiler/measured/table_grids.py): an m between rows is read from the rows of its own class."""
    import math

    block = build_measured("auto", get_model_spec("qwen3-32b-fp8"), get_device_spec("h100-sxm"), 2)
    table = next(s.tables["gemm_fp8_block"] for s in block.sources if "gemm_fp8_block" in s.tables)
    rows = table[(table["n"] == 5120) & (table["k"] == 5120)].set_index("m")["time_s"]  # qkv_proj at TP 2
    t = lambda m: block._gemm["qkv_proj"](m)[0]  # noqa: E731

    def loglog(m, lo, hi):
        w = math.log(m / lo) / math.log(hi / lo)
        return math.exp((1 - w) * math.log(rows[lo]) + w * math.log(rows[hi]))

    assert t(4097) == pytest.approx(rows[4097], rel=1e-9) and t(4096) == pytest.approx(rows[4096], rel=1e-9)
    assert rows[4097] > 1.05 * rows[4096]  # the step itself, measured
    assert t(1409) == pytest.approx(loglog(1409, 1281, 1537), rel=1e-9)  # 1409 % 4 == 1: rows 1281, 1537
    assert t(1408) == pytest.approx(loglog(1408, 1280, 1536), rel=1e-9)  # 1408 % 4 == 0: rows 1280, 1536
    # Above the last unaligned row (4353): the aligned curve times the step measured there.
    ratio = rows[4353] / loglog(4353, 4352, 8192)
    assert t(5001) == pytest.approx(loglog(5001, 4352, 8192) * ratio, rel=1e-9)
    assert not block._gemm["qkv_proj"](5001)[1]  # both curves read measured rows: not off the grid
