"""Usable memory per card and devices derived from a built-in (`base:`).

The KV pool starts from cudaMemGetInfo's total, not the marketed size: each built-in's file gives
`cuda_total_memory_gib` where a public log prints it (profiler/data/devices/*.yaml cite them).
The three hand-worked pools below (a 24 GB, a 48 GB and an 80 GB card) follow vLLM 0.19's
`Worker.determine_available_memory` term by term (profiler/memory.py): requested = ceil(total ×
utilization), minus the weights, the profile run's peak at the token budget, and the non-torch
memory; blocks = what is left // (16 tokens × 131,072 bytes) for Llama-3.1-8B in bf16.
"""
from __future__ import annotations

import math

import pytest

from profiler import get_device_spec, get_model_spec
from profiler.device_spec import BUILTIN_DEVICES
from profiler.measured.shipped import build_measured
from profiler.memory import NON_TORCH_ONE_GPU_BYTES, WORKSPACE_BYTES, vllm_kv_pool

LLAMA = get_model_spec("llama-3.1-8b")
WEIGHTS = 8_030_261_248 * 2 + 131072 * 128 * 2  # bf16 parameters + the rotary cos/sin cache
BLOCK_BYTES = 16 * 131072  # 16 tokens x 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes


def _by_hand(total_gib: float, sms: int) -> int:
    """Blocks of Llama-3.1-8B at gpu_memory_utilization 0.9, budget 2,048 tokens, 256 sequences
    (vLLM 0.19's API-server defaults below 70 GiB and on A100s)."""
    requested = math.ceil(int(total_gib * 2**30) * 0.9)
    sampler = (256 * 128256 * (2 + 4 + 4 + 4)  # logits, fp32 copy, probs, exponential noise
               + min(1 << (min(sms, 256) - 1).bit_length(), sms) * 128256 * 4  # Triton top-k/top-p rows
               + (2048 + 2 * 256) * 4096 * 2)  # the step's hidden states, last positions, rand_like
    forward = 2048 * 2 * (3 * 14336 + 4 * 4096)
    assert sampler > forward  # the 128k vocabulary makes the sampler the peak
    return (requested - WEIGHTS - (sampler + WORKSPACE_BYTES) - NON_TORCH_ONE_GPU_BYTES) // BLOCK_BYTES


@pytest.mark.parametrize("device, total_gib, sms, blocks", [
    ("rtx-4090", 23.65, 128, 2819),  # 24 GB card: 45,104 tokens (161 blocks fewer than at 24 GiB)
    ("l40s", 44.53, 142, 12437),  # 48 GB card: 198,992 tokens
    ("a100-80gb", 79.15, 108, 28398),  # 80 GB card: 454,368 tokens
])
def test_pool_by_hand_on_a_24_48_and_80_gb_card(device, total_gib, sms, blocks):
    spec = get_device_spec(device)
    assert spec.cuda_total_memory_gib == total_gib
    assert _by_hand(total_gib, sms) == blocks
    pool = vllm_kv_pool(LLAMA, spec, gpu_memory_utilization=0.9, block_size=16,
                        max_num_batched_tokens=2048, max_num_seqs=256)
    assert pool.num_blocks == blocks


def test_every_built_in_says_where_its_total_comes_from():
    cited = {name for name, d in BUILTIN_DEVICES.items() if d.cuda_total_memory_gib is not None}
    assert cited == {"h100-sxm", "h200", "a100-80gb", "l40s", "rtx-4090", "rtx-pro-6000"}
    for name, d in BUILTIN_DEVICES.items():
        if d.cuda_total_memory_gib is not None:
            assert d.cuda_total_memory_gib < d.memory_gib  # cudaMemGetInfo sees less than the marketed GiB
            assert "CUDA-visible total" in d.source
        else:
            assert "no CUDA-visible total known" in d.cuda_total_source


def _derived(**keys):
    return get_device_spec({"name": "my-h100", "base": "h100-sxm", **keys})


def test_a_derived_device_keeps_the_measured_tables_and_takes_its_host_overhead():
    mine = _derived(step_overhead_ms=0.9)
    assert (mine.name, mine.card, mine.cuda_total_memory_gib) == ("my-h100", "h100-sxm", 79.19)
    builtin = build_measured("auto", LLAMA, BUILTIN_DEVICES["h100-sxm"])
    measured = build_measured("auto", LLAMA, mine)
    assert measured is not None and builtin is not None  # not the roofline
    assert measured.step_overhead_s == pytest.approx(0.9e-3)
    # The same kernels, 0.9 ms of host time per step instead of the built-in's.
    extra = 0.9e-3 - BUILTIN_DEVICES["h100-sxm"].step_overhead_s
    step = ([1] * 32, [1000] * 32, [False] * 32)
    assert measured.predict_step_s(*step) == pytest.approx(builtin.predict_step_s(*step) + extra)


def test_a_derived_device_with_less_usable_memory_sizes_a_smaller_pool():
    kw = dict(gpu_memory_utilization=0.9, block_size=16, max_num_batched_tokens=8192, max_num_seqs=1024)
    full = vllm_kv_pool(LLAMA, BUILTIN_DEVICES["h100-sxm"], **kw)
    less = vllm_kv_pool(LLAMA, _derived(cuda_total_memory_gib=75.0), **kw)
    assert full.requested_bytes - less.requested_bytes == math.ceil(int(79.19 * 2**30) * 0.9) - math.ceil(
        int(75.0 * 2**30) * 0.9)
    assert less.num_blocks < full.num_blocks
    # memory_gib alone makes the given memory the CUDA-visible total
    assert _derived(memory_gib=64).cuda_total_memory_gib is None
    assert vllm_kv_pool(LLAMA, _derived(memory_gib=64), **kw).requested_bytes == math.ceil(64 * 2**30 * 0.9)


@pytest.mark.parametrize("keys, message", [
    ({"base": "h100"}, "device (inline): base: 'h100' is not a built-in device; valid: a100-40gb, "),
    ({"memory_gib": 96}, "device (inline): memory_gib: 96 exceeds the built-in h100-sxm's 80 GiB; no h100-sxm has more"),
    ({"memory_bandwidth_gb_per_s": 2000}, "device (inline): memory_bandwidth_gb_per_s: 2000 differs from the "
                                          "built-in h100-sxm's 3350; a device with base: keeps"),
    ({"cuda_total_memory_gib": 81}, "device (inline): <root>: cuda_total_memory_gib (81) exceeds memory_gib (80)"),
    ({"name": "h100-sxm"}, "device (inline): name: a device with base: h100-sxm needs a name of its own"),
])
def test_bad_derived_devices_are_refused_naming_the_key(keys, message):
    with pytest.raises(ValueError) as caught:
        _derived(**keys)
    assert str(caught.value).startswith(message)


def test_a_derived_device_file_names_the_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: my-l40s\nbase: l40\n")
    with pytest.raises(ValueError, match=rf"^{path}: base: 'l40' is not a built-in device; valid: .*l40s"):
        get_device_spec(str(path))
    path.write_text("name: my-l40s\nbase: l40s\nstep_overhead_ms: 1.5\n")
    spec = get_device_spec(str(path))
    assert (spec.card, spec.step_overhead_s, spec.memory_gib, spec.cuda_total_memory_gib) == ("l40s", 1.5e-3, 48, 44.53)
