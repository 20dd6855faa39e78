"""`sarathi-sim --help` and `--version` without the heavy imports; the lazily registered commands
list the help their modules give them. (How fast --help is, measured: BENCHMARKS.md.)"""
from __future__ import annotations

import importlib
import inspect
import json
import re
import subprocess
import sys
from importlib.metadata import version

import pytest
import typer
from typer.testing import CliRunner

from experiments.cli.main import _Commands, app

HEAVY = ("pandas", "matplotlib", "sklearn", "simpy", "torch", "scipy", "pyarrow", "numpy", "pydantic")


def test_help_lists_every_command_without_importing_heavy_modules():
    # A fresh interpreter: what `sarathi-sim --help` imports, not what this test session already has.
    code = ("import sys; from typer.testing import CliRunner; from experiments.cli.main import app; "
            "r = CliRunner().invoke(app, ['--help']); import json; "
            f"print(json.dumps([r.exit_code, r.output, sorted(m for m in {HEAVY!r} if m in sys.modules)]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    exit_code, output, heavy = json.loads(done.stdout.strip().splitlines()[-1])
    assert exit_code == 0 and heavy == []
    for name in ("sweep", "simulate", "flags", "trace", "engine", "profile", "fit", "calibrate", "verify"):
        assert f" {name} " in output


def test_lazy_commands_list_the_help_their_modules_give():
    for name, (module, attribute, short_help) in _Commands.lazy.items():
        target = getattr(importlib.import_module(module), attribute)
        if isinstance(target, typer.Typer):
            own = target.info.help
        else:
            own = " ".join(inspect.getdoc(target).split("\n\n")[0].split())
        assert short_help == own, name


def test_version_and_a_lazy_command_runs():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"sarathi-sim {version('sarathi-sim')}"
    result = CliRunner().invoke(app, ["trace", "--help"])
    assert result.exit_code == 0 and "stats" in result.output and "convert" in result.output
    result = CliRunner().invoke(app, ["flags", "--help"])
    assert result.exit_code == 0 and "--point" in result.output


COMMANDS = [["sweep"], ["simulate"], ["flags"], ["trace", "stats"], ["trace", "convert"], ["engine", "run"],
            ["profile"], ["profile", "import"], ["fit"], ["calibrate"], ["search-xpyd"], ["verify"]]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_at_80_columns_cuts_nothing_and_wraps_paragraphs_whole(command, monkeypatch):
    # Rich's panels cut option names and defaults at 80 columns ("engine.enable_expert_par…",
    # "--engine-overh…") and kept the docstrings' line breaks mid-sentence (issue 30 item 10).
    monkeypatch.setenv("COLUMNS", "80")
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert not re.search(r"[\w.-]…", result.output)  # a cut word (the help's own "…/path" is no cut)
    assert max(len(line) for line in result.output.splitlines()) <= 80
    description = result.output.split("\nArguments:")[0].split("\nOptions:")[0].split("\n\n")[1:]
    for paragraph in description:  # filled to the width: no line ends early but a paragraph's last
        lines = paragraph.splitlines()
        assert all(len(line) >= 60 for line in lines[:-1] if not line.lstrip().startswith(("-", "•"))), paragraph
    if command == ["search-xpyd"]:
        assert "config's engine.enable_expert_parallel)." in result.output
    if command == ["calibrate"]:
        assert "--engine-overhead / --no-engine-overhead" in result.output
