"""Host-speed normalisation (profiler.host_speed): the tracker, the engine clock that scales CPU
time by it, the profiler's scaled samples, and where the reference comes from. The probe is faked
wherever a value is asserted: live probe times are never bounded here."""
from __future__ import annotations

import csv
import json
import math
import time

import pytest

from profiler.host_speed import HostSpeedTracker, calibration_probe_s


class ScriptedProbe:
    """A probe whose successive times are given."""

    def __init__(self, times_s):
        self.times_s = list(times_s)
        self.calls = 0

    def measure_s(self) -> float:
        self.calls += 1
        return self.times_s.pop(0)


def test_tracker_probes_once_per_interval_and_takes_the_median_of_its_window():
    probe = ScriptedProbe([1.0, 5.0, 2.0, 3.0])
    tracker = HostSpeedTracker(probe, interval_s=0.0, window=3)  # probes on construction
    assert tracker.current_s() == 1.0
    tracker.maybe_probe()
    tracker.maybe_probe()
    assert tracker.samples_s == [1.0, 5.0, 2.0] and tracker.current_s() == 2.0
    tracker.maybe_probe()
    assert tracker.current_s() == 3.0  # median of 5, 2, 3: the first probe left the window
    assert tracker.median_s() == 2.5 and tracker.scale(1.5) == 0.5

    lazy = HostSpeedTracker(ScriptedProbe([4.0, 9.0]), interval_s=3600.0)
    lazy.maybe_probe()  # an hour of CPU time has not passed: no second probe
    assert lazy.samples_s == [4.0]


class FixedTracker:
    """A tracker reading a fixed probe time; counts the probes asked for."""

    def __init__(self, current_s):
        self.value_s, self.asked = current_s, 0

    def current_s(self):
        return self.value_s

    def maybe_probe(self):
        self.asked += 1


def test_normalized_clock_scales_cpu_time_to_the_reference_speed():
    from gpu_engine.clock import FastClock

    tracker = FixedTracker(2e-3)  # the host is 2x slower than when the reference (1 ms) was taken
    clock = FastClock("cpu-normalized", reference_probe_s=1e-3, host_speed=tracker)
    assert clock.end_step(1.0, None, measured_s=9.0, measured_cpu_s=0.004) == pytest.approx(1.002)
    assert clock.host_probe_s == 2e-3 and tracker.asked == 1  # probed after the step, outside it
    tracker.value_s = 0.5e-3
    assert clock.end_step(2.0, None, measured_s=9.0, measured_cpu_s=0.004) == pytest.approx(2.008)
    with pytest.raises(ValueError, match="needs the calibration's probe time"):
        FastClock("cpu-normalized")
    assert math.isnan(FastClock("cpu").host_probe_s)  # no probe without normalisation


def test_measured_steps_of_a_normalized_run_are_scaled_and_raw_on_request(tmp_path):
    import shutil

    from experiments.verification.verify import measured_step_times, read_measured_steps
    from tests.test_verify_steps import RUN

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    entries = [json.loads(line) for line in (run / "plans.jsonl").read_text().splitlines()]
    for i, entry in enumerate(entries):
        entry["measured_cpu_s"], entry["host_probe_s"] = 0.001 * (i + 1), 0.004 if i % 2 else 0.001
    (run / "plans.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    settings = json.loads((run / "engine.json").read_text())
    (run / "engine.json").write_text(json.dumps({**settings, "timing": "cpu-normalized", "reference_probe_s": 0.002}))
    expected = [0.001 * (i + 1) * 0.002 / (0.004 if i % 2 else 0.001) for i in range(len(entries))]
    assert read_measured_steps(run)[1] == pytest.approx(expected)
    assert measured_step_times(run, normalized=False).tolist() == [0.001 * (i + 1) for i in range(len(entries))]
    (run / "engine.json").write_text(json.dumps({**settings, "timing": "cpu-normalized"}))
    for reference in (None, "abc", 0, float("inf")):  # a clear error naming the file and key, no traceback
        (run / "engine.json").write_text(json.dumps({**settings, "timing": "cpu-normalized",
                                                     "reference_probe_s": reference}))
        with pytest.raises(ValueError, match="engine.json: timing cpu-normalized needs reference_probe_s"):
            read_measured_steps(run)
    (run / "engine.json").write_text(json.dumps({**settings, "timing": "cpu", "reference_probe_s": None}))
    assert len(read_measured_steps(run)[1]) == len(entries)  # only a normalized run reads the reference
    (run / "engine.json").write_text(json.dumps({**settings, "timing": "cpu-normalized", "reference_probe_s": 0.002}))
    for probe in (0, None, "fast", float("nan")):
        entries[3]["host_probe_s"] = probe
        (run / "plans.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
        with pytest.raises(ValueError, match=r"plans.jsonl:4: host_probe_s must be a finite number of seconds"):
            read_measured_steps(run)
    del entries[1]["host_probe_s"]
    (run / "plans.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    with pytest.raises(ValueError, match=r"plans.jsonl:2: plan entry has no host_probe_s"):
        read_measured_steps(run)


def test_calibration_probe_comes_from_the_profile_sidecar(tmp_path, monkeypatch):
    (tmp_path / "profile.json").write_text(json.dumps({"host_probe_s": 0.0017}))
    assert calibration_probe_s(f"profile:{tmp_path}") == 0.0017
    monkeypatch.setenv("HOME", str(tmp_path.parent))
    assert calibration_probe_s(f"profile:~/{tmp_path.name}") == 0.0017  # ~ expands, as for simulate
    assert calibration_probe_s("roofline") is None and calibration_probe_s("auto") is None
    (tmp_path / "profile.json").write_text(json.dumps({"dtype": "float32"}))  # CUDA or an older calibration
    assert calibration_probe_s(f"profile:{tmp_path}") is None
    for bad in (-1, 0, "fast", True, float("inf"), float("nan")):  # bool is an int to Python; inf is > 0
        (tmp_path / "profile.json").write_text(json.dumps({"host_probe_s": bad}))
        with pytest.raises(ValueError, match=r"profile.json: host_probe_s must be a finite positive number"):
            calibration_probe_s(f"profile:{tmp_path}")
    (tmp_path / "profile.json").write_text(json.dumps([{"host_probe_s": 0.0017}]))
    with pytest.raises(ValueError, match=r"profile.json: not a JSON object"):
        calibration_probe_s(f"profile:{tmp_path}")
    with pytest.raises(ValueError, match=r"nowhere/profile.json: cannot read"):
        calibration_probe_s(f"profile:{tmp_path / 'nowhere'}")


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class Phases:
    """A host alternating between full and half speed from one shape to the next: the probe takes
    1 ms or 2 ms, and the fake op (100 µs of CPU at full speed) twice as long in the slow phase."""

    def __init__(self):
        self.slow = False
        self.samples_s = []

    def maybe_probe(self):
        self.samples_s.append(self.current_s())

    def current_s(self):
        return 2e-3 if self.slow else 1e-3

    def median_s(self):
        return 1e-3


class SpinBench:
    def __init__(self, phases):
        self.phases = phases

    def callable(self, op, shape):
        self.phases.slow = not self.phases.slow  # the host changes speed between shapes
        return lambda: _spin(200e-6 if self.phases.slow else 100e-6)


def test_profiler_scales_every_shape_to_the_median_probe_speed():
    # The same op timed in fast and slow phases: scaled by the probe, the samples of every round
    # are about the full-speed 100 µs (unscaled, half of the pooled samples would be near 200 µs,
    # their mean near 150 µs; a few µs of loop overhead come on top).
    from profiler.harness import _time_grid
    from profiler.host_speed import REFERENCE_MODEL
    from profiler.ops import OpCatalogue

    catalogue = OpCatalogue(REFERENCE_MODEL, 1, 4, 4)
    op = catalogue.op("qkv_proj")
    grid = [[(op, {"num_tokens": n}) for n in (1, 2, 4)]]
    phases = Phases()
    rows, _, _ = _time_grid(SpinBench(phases), grid, catalogue, {"peak_flops": 1e12, "mem_bandwidth_bytes_per_s": 1e11},
                            "cpu", 0.3, 3, 1, 0, phases)
    timed = rows["linear"]
    assert len(timed) == 3 and all(row["rounds"] >= 2 for row in timed)  # both phases were pooled
    for row in timed:
        # (not the max: one sample in a few hundred can catch a timer interrupt)
        assert 99e-6 <= row["time_min_s"] and row["time_median_s"] <= 110e-6 and row["time_mean_s"] <= 120e-6, row


def test_ledger_begun_by_an_older_version_keeps_its_columns(tmp_path):
    from experiments.verification.fidelity_report import LEDGER_COLUMNS, append_ledger

    old_columns = [c for c in LEDGER_COLUMNS if c not in ("timing", "reference_probe_s", "host_probe_s_median")]
    ledger = tmp_path / "ledger.csv"
    ledger.write_text(",".join(old_columns) + "\n")
    append_ledger(ledger, {"device": "cpu", "timing": "cpu-normalized", "reference_probe_s": 0.002}, None, None, True)
    rows = list(csv.reader(ledger.open()))
    assert rows[0] == old_columns and len(rows[1]) == len(old_columns)  # no ragged row
    fresh = tmp_path / "fresh.csv"
    append_ledger(fresh, {"device": "cpu", "timing": "cpu-normalized", "reference_probe_s": 0.002}, None, None, True)
    row = next(csv.DictReader(fresh.open()))
    assert row["timing"] == "cpu-normalized" and float(row["reference_probe_s"]) == 0.002


def test_a_headline_error_that_is_not_a_number_fails_the_gate():
    from experiments.verification.verify import over_limit

    assert over_limit({"step_mape": float("nan"), "ttft_s_p50": 3.0}, 25.0) == {"step_mape": pytest.approx(float("nan"), nan_ok=True)}
    assert over_limit({"step_mape": 24.0}, 25.0) == {}


def test_tracker_summary_is_what_the_records_keep():
    tracker = HostSpeedTracker(ScriptedProbe([3.0, 1.0, 2.0]), interval_s=0.0)
    tracker.maybe_probe()
    tracker.maybe_probe()
    assert tracker.summary() == {"median_s": 2.0, "min_s": 1.0, "max_s": 3.0, "probes": 3}
