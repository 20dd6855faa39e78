"""Held-out error of interpolating attention across query heads (profiler/measured/head_interpolation.py).

For each shipped AIConfigurator attention table, each measured grouped-query head count (more
query than KV heads) with such a count on both sides (same KV heads and head_dim) is dropped and predicted from those two
neighbours by `rows_at_heads`; the error is |predicted / measured − 1| over the (batch, tokens)
points all three measured. Prints one row per device and table: the number of held-out counts,
their mean and worst MAPE.

    .venv/bin/python benchmarks/bench_head_interpolation.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler.measured.head_interpolation import rows_at_heads  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "profiler" / "data" / "measured"
TABLES = {"decode_attention": "kv_tokens", "context_attention": "query_tokens"}


def held_out_mape(table: pd.DataFrame, key: str) -> list[float]:
    """MAPE (%) of each measured head count predicted from its measured neighbours."""
    errors = []
    for (kv_heads, head_dim), group in table.groupby(["num_kv_heads", "head_dim"]):
        counts = sorted(h for h in group["num_heads"].unique() if h > kv_heads)  # grouped-query rows
        for low, mid, high in zip(counts, counts[1:], counts[2:]):
            without = group[group["num_heads"] != mid]
            predicted, note = rows_at_heads(without, int(mid), int(kv_heads), int(head_dim), ("batch_size", key))
            assert note == f"interpolated between {low} and {high} query heads"
            measured = group[group["num_heads"] == mid].groupby(["batch_size", key])["time_s"].mean()
            predicted = predicted.set_index(["batch_size", key])["time_s"]
            common = predicted.index.intersection(measured.index)
            errors.append(float(np.mean(np.abs(predicted[common] / measured[common] - 1.0)) * 100))
    return errors


def main() -> None:
    print("| device | table | held-out head counts | mean MAPE | worst MAPE |")
    print("|---|---|---|---|---|")
    for directory in sorted(DATA.glob("*/aiconfigurator")):
        for name, key in TABLES.items():
            path = directory / f"{name}.csv.gz"
            if not path.is_file():
                continue
            errors = held_out_mape(pd.read_csv(path), key)
            if errors:
                print(f"| {directory.parent.name} | {name} | {len(errors)} | {np.mean(errors):.1f} % | {max(errors):.1f} % |")


if __name__ == "__main__":
    main()
