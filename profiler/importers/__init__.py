"""Importers of public kernel databases into measured-table directories (`profiler/measured/tables.py`),
one module per source: `aiconfigurator`, `llmservingsim`, `vidur`. `import_source` is what
`sarathi-sim profile import` runs."""
from __future__ import annotations

from pathlib import Path

from profiler.measured.tables import MeasuredTableError, MeasuredTables
from profiler.model_spec import ModelSpec

SOURCES = ("aiconfigurator", "llmservingsim", "vidur")


def import_source(kind: str, source: str | Path, *, model: ModelSpec | None = None, device: str | None = None,
                  tensor_parallel_size: int = 1, all_reduce_csv: str | Path | None = None) -> MeasuredTables:
    """Read one source's files into `MeasuredTables`.

    Args:
        kind: one of `SOURCES`.
        source: AIConfigurator: a system folder (`.../aiconfigurator/h100_sxm`); LLMServingSim: a
            model's variant folder (`.../RTXPRO6000/Qwen/Qwen3-32B/bf16`); Vidur: an `mlp.csv`.
        model: the model (required for LLMServingSim; checked against the tables otherwise).
        device: built-in device key (default: from the source's folder names).
        tensor_parallel_size: the TP degree to read (LLMServingSim, Vidur).
        all_reduce_csv: Vidur's all_reduce.csv (optional).

    Raises:
        MeasuredTableError: an unknown kind, a missing model for LLMServingSim, bad files
            (naming file and column), or, with `model`, tables that do not cover it
            (`check_coverage`).
    """
    if kind == "aiconfigurator":
        from profiler.importers.aiconfigurator import import_aiconfigurator

        tables = import_aiconfigurator(source, device)
    elif kind == "llmservingsim":
        from profiler.importers.llmservingsim import import_llmservingsim

        if model is None:
            raise MeasuredTableError(f"{source}: an LLMServingSim profile needs --model (its config.json): the "
                                     "files hold per-rank widths, not the model's shapes")
        tables = import_llmservingsim(source, model, tensor_parallel_size, device)
    elif kind == "vidur":
        from profiler.importers.vidur import import_vidur

        tables = import_vidur(source, model, tensor_parallel_size, device, all_reduce_csv)
    else:
        raise MeasuredTableError(f"unknown source kind {kind!r}; valid: {', '.join(SOURCES)}")
    if model is not None:
        check_coverage(tables, model, tensor_parallel_size, str(source))
    return tables


def check_coverage(tables: MeasuredTables, model: ModelSpec, tensor_parallel_size: int, where: str) -> None:
    """Raise unless the per-head attention tables (where present) have rows at the model's heads
    per rank, KV heads per rank and head_dim.

    Raises:
        MeasuredTableError: naming the source, the table and its columns, and the heads it has.
    """
    heads = model.num_attention_heads // tensor_parallel_size
    kv_heads = model.kv_heads_per_rank(tensor_parallel_size)
    for name in ("context_attention", "decode_attention"):
        table = tables.tables.get(name)
        if table is None:
            continue
        rows = table[(table["num_heads"] == heads) & (table["num_kv_heads"] == kv_heads)
                     & (table["head_dim"] == model.head_dim)]
        if rows.empty:
            have = sorted(set(zip(table["num_heads"], table["num_kv_heads"], table["head_dim"])))
            raise MeasuredTableError(
                f"{where}: table {name} (columns num_heads, num_kv_heads, head_dim) has no rows at "
                f"{heads}, {kv_heads}, {model.head_dim} (model {model.name!r} at tp {tensor_parallel_size}); "
                f"it has {len(have)} combinations, e.g. {have[:6]}")
