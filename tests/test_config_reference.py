"""docs/config.md is the config reference generated from the pydantic models: it must match them."""
from __future__ import annotations

from pathlib import Path

from experiments.config import EngineConfig, SweepConfig
from experiments.config_reference import field_comments, render, type_text

DOC = Path(__file__).resolve().parents[1] / "docs" / "config.md"


def test_committed_reference_is_up_to_date():
    assert DOC.read_text() == render(), (
        "docs/config.md is out of date with experiments/config/: run "
        "`python -m experiments.config_reference > docs/config.md`")


def test_reference_lists_every_key_with_its_type_default_and_bounds():
    page = render()
    for name in SweepConfig.model_fields:
        assert f"| `{name}` |" in page
    for name in EngineConfig.model_fields:
        assert f"| `engine.{name}` |" in page
    assert "| `engine.block_size` | int | 16 | ≥ 1, ≤ 256 |" in page
    assert "| `engine.on_too_long` | reject \\| truncate | reject | prompt + output > max_model_len |" in page
    assert "| `sarathi` | `engine.chunk_size` |" in page


def test_types_and_comments_are_read_from_the_models():
    assert type_text(EngineConfig.model_fields["max_model_len"].annotation) == "int \\| null"
    assert field_comments(EngineConfig)["on_too_long"] == "prompt + output > max_model_len"


def test_every_trace_kind_and_nested_model_has_a_section():
    from experiments.config_reference import sections

    titles = [title for title, _, _ in sections()]
    assert titles[:3] == ["Top level", "trace: kind profile", "trace: kind file"]
    assert "trace: kind poisson / synthetic" in titles
    assert "LengthClip (in `trace.prompt_tokens`)" in titles and "DraftModel (in `engine.draft`)" in titles
