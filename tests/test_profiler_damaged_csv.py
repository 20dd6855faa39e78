"""A damaged profile CSV is a ProfileError naming the file, the row (CSV line) and the column —
never a pandas/scikit-learn exception and never a silent fit (tester's report: a row changed to
`a,b,c`, an empty `linear.csv`, an `inf` time, a negative `num_tokens`)."""
import shutil
from pathlib import Path

import pytest

from profiler.profile_data import Profile, ProfileError
from profiler.shipped import load_fitted

RECORDED = Path(__file__).parent / "data" / "profiles" / "cpu-tiny-llama"
# linear.csv line 3 (the second data row): qkv_proj at num_tokens 2.
LINE_3 = "qkv_proj,2,4.877900000010982e-05,2.9341666665535133e-05,9.562966666957588e-05,"\
    "4.992078940948648e-05,1.2428072421986919e-05,203,6,29"


def damaged(tmp_path, line_3: str | None) -> Path:
    """A copy of the recorded profile with linear.csv line 3 replaced (None: the file emptied)."""
    directory = tmp_path / "damaged"
    shutil.copytree(RECORDED, directory)
    csv = directory / "linear.csv"
    lines = csv.read_text().splitlines()
    assert lines[2] == LINE_3  # the row the edits below start from
    if line_3 is None:
        csv.write_text("")
    else:
        lines[2] = line_3
        csv.write_text("\n".join(lines) + "\n")
    return directory


@pytest.mark.parametrize("line_3, message", [
    ("a,b,c", "row 3, column num_tokens: 'b' is not a whole number >= 1"),
    (LINE_3.replace(",4.877900000010982e-05,", ",inf,"),
     "row 3, column time_median_s: 'inf' is not a finite number of seconds > 0"),
    (LINE_3.replace(",4.877900000010982e-05,", ",nan,"),
     "row 3, column time_median_s: 'nan' is not a finite number of seconds > 0"),
    (LINE_3.replace("qkv_proj,2,", "qkv_proj,-2,"), "row 3, column num_tokens: '-2' is not a whole number >= 1"),
    (LINE_3.replace("qkv_proj,2,", "qkv_proj,2.5,"), "row 3, column num_tokens: '2.5' is not a whole number >= 1"),
    (LINE_3.replace(",203,6,29", ",203,0,29"), "row 3, column calls_per_sample: '0' is not a whole number >= 1"),
    (LINE_3.replace(",1.2428072421986919e-05,", ",-1e-06,"),
     "row 3, column time_std_s: '-1e-06' is not a finite number of seconds >= 0"),
    ("qkv_proj,2", "row 3, column time_median_s: empty is not a finite number of seconds > 0"),
    (LINE_3.replace("qkv_proj,", "qkv_projx,"),
     "row 3, column op: 'qkv_projx' is not an op of family 'linear' "
     "(valid: down_proj, gate_up_proj, lm_head, o_proj, qkv_proj)"),
    (None, "empty file (no header row); re-run `sarathi-sim profile` or remove the 'linear' entry "
     "from profile.json"),
])
def test_a_damaged_linear_csv_names_file_row_and_column(tmp_path, line_3, message):
    directory = damaged(tmp_path, line_3)
    with pytest.raises(ProfileError) as info:
        Profile.load(directory)
    assert str(info.value) == f"{directory / 'linear.csv'}: {message}"


def test_fit_and_a_profile_cost_model_report_the_damaged_row(tmp_path):
    from profiler.fit_report import MODEL_FILE, fit_directory

    directory = damaged(tmp_path, "a,b,c")
    expected = f"{directory / 'linear.csv'}: row 3, column num_tokens: 'b' is not a whole number >= 1"
    with pytest.raises(ProfileError) as info:
        fit_directory(directory)
    assert str(info.value) == expected
    assert not (directory / MODEL_FILE).exists()
    # `simulate --set cost_model=profile:DIR`: the point's cost model is built from the profile.
    with pytest.raises(ProfileError) as point_info:
        load_fitted(directory)
    assert str(point_info.value) == expected


def test_the_recorded_profile_still_loads_with_numeric_columns():
    profile = Profile.load(RECORDED)
    linear = profile.tables["linear"]
    assert len(linear) == 4 * 59 + 37  # 59 token counts of 4 projections, 37 sequence counts of lm_head
    assert linear["num_tokens"].dtype == "int64" and linear["time_median_s"].dtype == float
    assert linear.loc[1, "num_tokens"] == 2 and linear.loc[1, "time_median_s"] == 4.877900000010982e-05
