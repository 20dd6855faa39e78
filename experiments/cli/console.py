"""The CLI's error output, shared by every `sarathi-sim` sub-command."""
from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape


def fail(message: str) -> None:
    """Print `error: message` on stderr and exit with status 2 (a usage or input error).

    The message is escaped, so text in brackets ("[low, high]", a list value) prints as written
    instead of being read as rich markup.
    """
    # soft_wrap: one line however long (a long path must not be broken where a script reads it).
    Console(stderr=True, width=120).print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)
