"""`sarathi-sim profile import`: writes a measured-table directory that `cost_model: measured:DIR`
prices with, and bad input exits 2 with the file named (no traceback)."""
from __future__ import annotations

from typer.testing import CliRunner

from experiments.cli.main import app
from profiler.measured.tables import MeasuredTables
from tests.conftest import shared_path


def test_import_aiconfigurator_then_price_with_it(tmp_path):
    source = shared_path("profiles", "aiconfigurator", "a100_sxm")
    result = CliRunner().invoke(app, ["profile", "import", str(source), "--from", "aiconfigurator",
                                      "--model", "llama-2-70b", "--tp", "2", "--out", str(tmp_path / "a100")])
    assert result.exit_code == 0, result.output
    assert "licence Apache-2.0" in result.output and f"measured:{tmp_path / 'a100'}" in result.output
    tables = MeasuredTables.load(tmp_path / "a100")
    assert tables.meta["engine_version"] == "0.14.0" and tables.meta["device"]["key"] == "a100-80gb"
    assert len(tables.tables["all_reduce"]) == 138


def test_bad_source_exits_2_naming_the_file(tmp_path):
    result = CliRunner().invoke(app, ["profile", "import", str(tmp_path), "--from", "aiconfigurator",
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "no system.yaml" in result.output
    result = CliRunner().invoke(app, ["profile", "import", str(tmp_path), "--from", "mystery", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "unknown source kind 'mystery'" in result.output
    assert not (tmp_path / "out").exists()
