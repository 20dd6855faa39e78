"""Every shipped config in experiments/configs/ loads and expands to the points its README describes
(load_config only: nothing is simulated)."""
from pathlib import Path

import pytest

from experiments.config import SweepConfig, load_config
from profiler import get_model_spec

CONFIGS = Path(__file__).resolve().parent.parent / "experiments" / "configs"


def points_of(path: Path, *overrides: str) -> list[SweepConfig]:
    _, points = load_config(path, list(overrides), on_warning=lambda text: None)
    return [SweepConfig.model_validate(p) for p in points]


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_every_shipped_config_loads(name, tmp_path):
    overrides = []
    if name == "azure_conv.yaml":  # the real trace's path is given on the command line
        trace = tmp_path / "conv.csv"
        trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                         "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n")
        overrides = [f"trace.path={trace}"]
    if name == "kv_offload_mooncake.yaml":  # the Mooncake trace's path too
        trace = tmp_path / "conversation_trace.jsonl"
        trace.write_text('{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [0, 1]}\n'
                         '{"timestamp": 9, "input_length": 600, "output_length": 7, "hash_ids": [0, 2]}\n')
        overrides = [f"trace.path={trace}"]
    assert len(points_of(CONFIGS / name, *overrides)) >= 3


# The paper's pairs (REFERENCE §1.5, osdi-experiments/figure-5-6/*.yml): per trace, vLLM at both
# SLOs, Sarathi budget 512 at the strict SLO and 2048 at the relaxed one (5x strict).
@pytest.mark.parametrize("name, strict_s", [("sarathi_serve_mistral_7b.yaml", 0.1), ("sarathi_serve_yi_34b.yaml", 0.2)])
def test_sarathi_serve_capacity_configs_pair_budgets_with_the_papers_slos(name, strict_s):
    points = points_of(CONFIGS / name)
    got = sorted((p.trace.name, p.engine.scheduler, p.engine.token_budget, p.slo["tbt_p99_s"]) for p in points)
    relaxed_s = 5 * strict_s
    want = []
    for trace, max_seq_len in (("sharegpt", 8192), ("arxiv-summarization", 16384)):
        want += [(trace, "vllm", max_seq_len, strict_s), (trace, "vllm", max_seq_len, relaxed_s),
                 (trace, "sarathi", 512, strict_s), (trace, "sarathi", 2048, relaxed_s)]
    assert got == sorted(want)
    for p in points:
        assert p.slo["scheduling_delay_p50_s"] == 2.0
        assert (p.search.num_requests, p.search.precision, p.search.seeds) == (2048, 0.025, 1)
        assert p.engine.max_num_seqs == 128 and p.device == "a100-80gb" and p.cost_model == "auto"


def test_yi_34b_config_json_has_the_published_shapes():
    # 01-ai/Yi-34B-200K config.json: 60 layers, hidden 7168, 56 heads / 8 KV heads (head_dim 128),
    # intermediate 20480, vocab 64000, untied LM head.
    spec = get_model_spec(CONFIGS / "models" / "yi-34b-200k")
    assert (spec.num_layers, spec.hidden_size, spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim,
            spec.intermediate_size, spec.vocab_size, spec.tie_word_embeddings) == (60, 7168, 56, 8, 128, 20480, 64000,
                                                                                   False)
    # 60 x (q 7168² + k,v 2 x 7168 x 1024 + o 7168² + 3 x 7168 x 20480 + 2 norms x 7168)
    # + 2 x 64000 x 7168 (embedding, LM head) + final norm 7168 = 34,388,917,248
    assert spec.num_params == 34_388_917_248
