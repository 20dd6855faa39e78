"""Sub-commands imported only when they run, so `sarathi-sim --help` starts in a fraction of a second.

The commands' modules import pandas, matplotlib, scikit-learn, SimPy or torch (directly or
through the packages they use); importing all of them to print a list of names took most of a
second. `LazyGroup` lists a lazy command by a short help text written beside its registration
(`LAZY_COMMANDS` in `experiments/cli/main.py`; tests/test_cli_startup.py checks it against the
command's own) and imports the module when the command is run or its own `--help` is asked for.
"""
from __future__ import annotations

import importlib
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup


class LazyGroup(TyperGroup):
    """A Typer group whose `lazy` commands ({name: (module, attribute, short help)}) are loaded
    on first use. The attribute is a command function or a `typer.Typer` sub-app."""

    lazy: dict[str, tuple[str, str, str]] = {}
    _listing = False

    def list_commands(self, ctx) -> list[str]:
        return [*super().list_commands(ctx), *(name for name in self.lazy if name not in self.commands)]

    def get_command(self, ctx, cmd_name: str):
        if cmd_name in self.commands or cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module, attribute, short_help = self.lazy[cmd_name]
        if self._listing:  # the group's own help lists names and short help only: no import
            return TyperCommand(name=cmd_name, help=short_help, short_help=short_help)
        command = load_command(cmd_name, getattr(importlib.import_module(module), attribute))
        self.commands[cmd_name] = command
        return command

    def format_help(self, ctx, formatter) -> None:
        self._listing = True
        try:
            return super().format_help(ctx, formatter)
        finally:
            self._listing = False


def load_command(name: str, target: Any):
    """The click command of a command function or a `typer.Typer` sub-app, named `name`."""
    if isinstance(target, typer.Typer):
        command = typer.main.get_group(target)
    else:
        holder = typer.Typer(add_completion=False, rich_markup_mode=None)
        holder.command(name=name)(target)
        command = typer.main.get_command(holder)
    command.name = name
    return command
