"""The command blocks of README.md and docs/*.md marked runnable run from a clone and succeed.

A block whose fence is ```` ```bash runnable ```` is run here, line by line, in a scratch folder
that holds the checkout's folders (so `runs/` lands there, not in the checkout), with
`.venv/bin/sarathi-sim` as this interpreter's `python -m experiments.cli.main`; `bash runnable
slow` blocks only under `-m slow`. Every page's links to other files of the checkout resolve, and
no page sends a reader to `../shared/` (a clone has none) in a command.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```", re.S | re.M)
_SARATHI = ".venv/bin/sarathi-sim"


def blocks(kind: str) -> list[tuple[str, str]]:
    """(page: first line, block text) of every block whose fence info is exactly `kind`."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            if match["info"].strip() == kind:
                line = text[:match.start()].count("\n") + 1
                found.append((f"{page.relative_to(REPO)}:{line}", match["body"]))
    return found


def commands(block: str) -> list[list[str]]:
    """The block's commands as argument lists: one a line (a trailing backslash continues it),
    comments dropped, `.venv/bin/sarathi-sim` as this interpreter running the CLI module."""
    text = block.replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        args = shlex.split(line, comments=True)
        if not args:
            continue
        assert args[0] == _SARATHI, f"a runnable block runs sarathi-sim only, got {line!r}"
        found.append([sys.executable, "-m", "experiments.cli.main", *args[1:]])
    return found


def _run(block: str, tmp_path: Path) -> None:
    for entry in REPO.iterdir():  # the checkout's folders and files, linked: outputs stay in tmp_path
        if entry.name not in ("runs", ".git", ".venv") and not entry.name.startswith("."):
            (tmp_path / entry.name).symlink_to(entry)
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "120"}
    for args in commands(block):
        done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{shlex.join(args[3:])} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("where, block", blocks("bash runnable"), ids=[w for w, _ in blocks("bash runnable")])
def test_a_runnable_block_runs_from_a_clone(where, block, tmp_path):
    _run(block, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("where, block", blocks("bash runnable slow"), ids=[w for w, _ in blocks("bash runnable slow")])
def test_a_slow_runnable_block_runs_from_a_clone(where, block, tmp_path):
    _run(block, tmp_path)


def test_the_pages_have_runnable_blocks_and_links_that_resolve():
    assert len(blocks("bash runnable")) >= 8 and len(blocks("bash runnable slow")) >= 3
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if not target.startswith(("http://", "https://")):
                assert (page.parent / target).exists(), f"{page.relative_to(REPO)}: link to {target} is broken"
        for _, body in _FENCE.findall(text):
            assert "../shared" not in body, f"{page.relative_to(REPO)}: a command reads ../shared/, which a clone has not"
