"""The real engine: a torch Llama-family engine that executes `simulator.scheduler` plans on a device.

One concept per file (nano-vllm's shape):
    model.py            the Llama decoder over a paged KV cache (RMSNorm, rotary, GQA, SwiGLU)
    checkpoint.py       Hugging Face config.json + *.safetensors in and out
    kv_cache.py         per-layer K/V tensors indexed by the scheduler's block ids
    attention.py        step metadata and the torch reference paged attention (mixed batches)
    triton_attention.py the Triton paged-attention kernel (same contract)
    inputs.py           a step's sequences -> flat token, position and slot tensors
    runner.py           one forward pass per step, returning the sampled rows' logits
    sampler.py          greedy / temperature sampling
    drafting.py         n-gram prompt-lookup drafts (split-N)
    speculation.py      greedy verification of drafts
    swap.py             swap preemption: KV to host memory and back
    engine.py           executes a BatchPlan and reports its StepOutcome
    clock.py            wall, fast (idle skipped) and cost-model-priced clocks
    driver.py           replays a trace: arrivals, schedule/execute/complete loop, records
    records.py          the run's tables (the simulator's schema), plan log, drafts
    build.py            assembles model, cache, scheduler and engine from settings

Importing this package imports nothing; its modules import torch (the `engine` extra). Nothing
outside gpu_engine/ imports it except the `engine` CLI, benchmarks and the profiler's timing code.
"""
