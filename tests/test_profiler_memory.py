"""kv_pool_blocks: the KV pool formula of DESIGN.md "Files", worked by hand."""
import pytest

from profiler import get_device_spec, get_model_spec, kv_pool_blocks

LLAMA_3_8B = get_model_spec("llama-3-8b")


def test_llama_3_8b_h100_pool_by_hand():
    usable = 80 * 2**30 * 0.9  # 77,309,411,328 bytes
    weights = 8_030_261_248 * 2  # bf16
    activations = 512 * (4 * 4096 + 2 * 14336) * 2  # tokens x (4 hidden + 2 ffn) x bf16
    logits = 128 * 128256 * 4  # fp32 logits of min(max_num_seqs=128, 512) rows
    reserve = 2**30
    block = 16 * 131072  # block_size x KV bytes per token
    expected = int((usable - weights - activations - logits - reserve) // block)
    assert expected == 28640
    got = kv_pool_blocks(LLAMA_3_8B, get_device_spec("h100-sxm"), gpu_memory_utilization=0.9,
                         block_size=16, max_num_batched_tokens=512)
    assert got == expected


def test_pool_matches_reference_order():
    # REFERENCE.md §5: ≈427k tokens for llama-3-8b and ≈112k for llama-2-7b in (72 GB − weights) on
    # an A100-80; 72 GiB rather than GB, less activations and reserve, lands a few % above.
    a100 = get_device_spec("a100-80gb")
    for name, reference_tokens in (("llama-3-8b", 427e3), ("llama-2-7b", 112e3)):
        tokens = 16 * kv_pool_blocks(get_model_spec(name), a100, gpu_memory_utilization=0.9,
                                     block_size=16, max_num_batched_tokens=512)
        assert reference_tokens < tokens < 1.1 * reference_tokens


def test_tensor_parallel_splits_weights_and_kv():
    a100 = get_device_spec("a100-80gb")
    llama_70b = get_model_spec("llama-2-70b")
    tp4 = kv_pool_blocks(llama_70b, a100, gpu_memory_utilization=0.9, block_size=16,
                         max_num_batched_tokens=512, tensor_parallel_size=4)
    usable = 80 * 2**30 * 0.9
    weights = llama_70b.num_params * 2 / 4
    activations = 512 * (4 * 8192 + 2 * 28672 // 4) * 2 + 128 * 32000 * 4
    block = 16 * (2 * 80 * (8 // 4) * 128 * 2)  # 2 of the 8 KV heads per rank
    assert tp4 == int((usable - weights - activations - 2**30) // block)


def test_too_large_model_names_everything():
    with pytest.raises(ValueError, match=r"llama-2-70b.*a100-80gb.*tensor_parallel_size=1"):
        kv_pool_blocks(get_model_spec("llama-2-70b"), get_device_spec("a100-80gb"),
                       gpu_memory_utilization=0.9, block_size=16, max_num_batched_tokens=512)
