"""The report's binned TBT CDF (experiments/planning/tbt_cdf.py): the fraction at each bin edge is
exact, the curve starts at the smallest gap (1/n) and ends at the largest (1), and a requests
file gives the same curve as the frame it was written from."""
import numpy as np
import pandas as pd

from experiments.planning.tbt_cdf import binned_tbt_cdf
from simulator.records_parquet import write_in_row_groups


def _requests():
    # point 0: gaps 0.01, 0.01, 0.02 (request 0) and 0.5 (request 1); point 1: gap 0.1; None: no times
    return pd.DataFrame({"point_id": [0, 0, 0, 1],
                         "token_times_s": [[1.0, 1.01, 1.02, 1.04], [2.0, 2.5], None, [3.0, 3.1]]})


def test_curve_of_a_frame_is_exact_at_bin_edges():
    x_s, fraction = binned_tbt_cdf([_requests()]).curve(0)
    # the gaps 1.01-1.0 and 1.02-1.01 differ in the last bits but fall in one bin; 0.02, 0.5 in others
    assert fraction.tolist() == [0.25, 0.5, 0.75, 1.0]
    assert x_s[0] == min(1.01 - 1.0, 1.02 - 1.01) and x_s[-1] == 0.5
    assert 0.01 <= x_s[1] <= 0.01 * 1.004 and 0.02 <= x_s[2] <= 0.02 * 1.004  # upper edges, < 0.4 % above
    x1, f1 = binned_tbt_cdf([_requests()]).curve(1)
    assert f1.tolist() == [1.0, 1.0] and x1[0] == x1[-1] == 3.1 - 3.0
    assert binned_tbt_cdf([_requests()]).curve(7)[0].size == 0  # no such point: nothing to draw


def test_a_file_gives_the_frame_curve(tmp_path):
    frame = _requests()
    write_in_row_groups(frame, tmp_path / "r.parquet", row_group_rows=3)
    for point_id in (0, 1):
        from_file = binned_tbt_cdf([tmp_path / "r.parquet"]).curve(point_id)
        from_frame = binned_tbt_cdf([frame]).curve(point_id)
        assert all(np.array_equal(a, b) for a, b in zip(from_file, from_frame))
