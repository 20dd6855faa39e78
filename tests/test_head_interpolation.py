"""Attention rows at a query-head count the tables lack (profiler/measured/head_interpolation.py):
linear in the query heads between the bracketing measured counts, at the same KV heads and
head_dim; never extrapolated; and the measured cost model prices Qwen2.5-7B's 28/4 heads on the
shipped H100 tables from them instead of the roofline."""
from __future__ import annotations

import pandas as pd
import pytest

from profiler.device_spec import get_device_spec
from profiler.measured.head_interpolation import rows_at_heads
from profiler.measured.shipped import build_measured
from profiler.model_spec import get_model_spec


def _table() -> pd.DataFrame:
    rows = []
    for heads, per_head_s in ((4, 1.0), (8, 2.0), (16, 6.0)):
        for batch in (1, 2):
            for kv in (100, 1000):
                rows.append((heads, 2, 64, batch, kv, per_head_s * batch * kv * 1e-6))
    rows.append((8, 2, 64, 4, 100, 9.0))  # a point the 16-head rows lack: not interpolated
    rows.append((12, 4, 64, 1, 100, 5.0))  # other KV heads: never mixed in
    for batch in (1, 2):  # multi-head rows (2 over 2): another kernel, never a bracket
        for kv in (100, 1000):
            rows.append((2, 2, 64, batch, kv, 0.1e-6 * batch * kv))
    return pd.DataFrame(rows, columns=["num_heads", "num_kv_heads", "head_dim", "batch_size", "kv_tokens", "time_s"])


def test_measured_heads_are_returned_as_they_are():
    rows, note = rows_at_heads(_table(), 8, 2, 64, ("batch_size", "kv_tokens"))
    assert note is None and len(rows) == 5 and rows["time_s"].max() == 9.0


def test_twelve_heads_are_the_midpoint_of_eight_and_sixteen_at_each_common_point():
    rows, note = rows_at_heads(_table(), 12, 2, 64, ("batch_size", "kv_tokens"))
    assert note == "interpolated between 8 and 16 query heads"
    assert sorted(zip(rows["batch_size"], rows["kv_tokens"])) == [(1, 100), (1, 1000), (2, 100), (2, 1000)]
    # (2 + 6) / 2 = 4 µs per batch·kv-token: batch 2, 1000 tokens → 8,000 µs
    at = rows.set_index(["batch_size", "kv_tokens"])["time_s"]
    assert at[(2, 1000)] == pytest.approx(4.0 * 2 * 1000 * 1e-6)
    assert at[(1, 100)] == pytest.approx(4.0 * 100 * 1e-6)
    assert (rows["num_heads"] == 12).all() and (rows["num_kv_heads"] == 2).all() and (rows["head_dim"] == 64).all()
    rows, _ = rows_at_heads(_table(), 6, 2, 64, ("batch_size", "kv_tokens"))  # half-way from 4 to 8: 1.5 µs
    assert rows.set_index(["batch_size", "kv_tokens"])["time_s"][(1, 100)] == pytest.approx(1.5 * 100e-6)


@pytest.mark.parametrize("heads, kv_heads, head_dim", [(20, 2, 64), (3, 2, 64), (12, 3, 64), (12, 2, 128)])
def test_nothing_outside_the_grouped_query_counts_or_at_other_kv_heads_or_head_dim(heads, kv_heads, head_dim):
    """20 is above 16; 3 over 2 KV heads lies between the multi-head 2/2 rows and 4/2, and a
    multi-head row is no bracket; no rows at 3 KV heads or at head_dim 128."""
    rows, note = rows_at_heads(_table(), heads, kv_heads, head_dim, ("batch_size", "kv_tokens"))
    assert rows.empty and note is None


def test_qwen2_5_7b_on_h100_prices_attention_from_the_tables_between_24_and_32_heads():
    """Qwen2.5-7B: 28 query heads over 4 KV heads, which AIConfigurator does not measure; the
    shipped h100-sxm tables have 24 and 32 at 4 KV heads. Its decode attention is 1/2 of the way
    from the 24-head rows to the 32-head rows at each measured point."""
    model = build_measured("auto", get_model_spec("qwen2.5-7b"), get_device_spec("h100-sxm"), 1)
    d = model.describe()
    assert "decode_attention" not in d["roofline_parts"] and "context_attention" not in d["roofline_parts"]
    assert d["parts"]["decode_attention"].endswith("at heads 28/4, head_dim 128 (interpolated between 24 and 32 query heads)")
    table = model.sources[0].tables["decode_attention"]
    at = {h: table[(table.num_heads == h) & (table.num_kv_heads == 4) & (table.head_dim == 128)
                   & (table.batch_size == 8) & (table.kv_tokens == 4095)]["time_s"].mean() for h in (24, 32)}
    t, out = model._decode_grid(8, 4095)
    assert not out and t == pytest.approx(0.5 * at[24] + 0.5 * at[32], rel=1e-9)
