"""Ctrl-C and SIGTERM for the `sarathi-sim` command: one way to stop, wherever the signal lands.

Python's own Ctrl-C raises `KeyboardInterrupt` wherever the main thread happens to be: inside a
weakref callback or `__del__` it is printed ("Exception ignored ...") and lost, so the run went
on and exited 0; after the command's last line it escaped to the interpreter, which then killed
itself with SIGINT (exit -2, no message). SIGTERM (`kill`, a job scheduler's time limit) ended
the process at once, without the cleanup and message of Ctrl-C.

`run_command` runs the command with one handler for both signals (`_on_signal`) that:
- notes the signal (the first one counts), and, while the command is working, raises it as Ctrl-C
  does: `KeyboardInterrupt` for SIGINT, `Terminated` (a `KeyboardInterrupt`) for SIGTERM, so
  every `except KeyboardInterrupt` cleanup of the project handles both;
- once the command handles it (`handling`), only notes further ones, so its cleanup and message
  finish;
- raises it again at the command's safe points (`check`) when it was swallowed where it landed
  (and keeps Python from printing "Exception ignored ..." for it there: `_unraisable`).
The process then exits 128 + the signal's number (130 for SIGINT, 143 for SIGTERM) whenever one
was received, whatever the command had decided, and says so when the command had not.

Only the command line installs the handler (`experiments.cli.main.app`); in-process callers
(tests' CliRunner) keep Python's defaults. A forked worker gets the defaults back (`_in_child`).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C's `KeyboardInterrupt` is, so a run stops the same way."""


class _State:
    received: int | None = None  # the first signal received, or None
    raising: bool = False  # the handler raises (the command is working, not yet handling it)
    handled: bool = False  # the command handled it (its own message said so)
    installed: dict[int, Any] = {}  # signal: the handler before ours
    unraisable_hook: Any = None  # sys.unraisablehook before ours


_state = _State()


def _exception(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signal.Signals(signum).name)


def _on_signal(signum: int, frame) -> None:
    if _state.received is None:
        _state.received = signum
    if _state.raising:
        raise _exception(_state.received)


def _unraisable(unraisable) -> None:
    """sys.unraisablehook: our own interruption, raised where Python cannot propagate it (a
    weakref callback, `__del__`), is already noted (`check`, the exit status): no report of it."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _state.received is not None:
        return
    (_state.unraisable_hook or sys.__unraisablehook__)(unraisable)


def received() -> int | None:
    """The first SIGINT or SIGTERM received while the handler was installed, or None."""
    return _state.received


def check() -> None:
    """A safe point of the command (a point finished, the results are in): raise the signal
    received while the command was working, which was swallowed where it landed (a weakref
    callback, a `__del__`); nothing when none was, or it is being handled.

    Raises:
        KeyboardInterrupt: SIGINT was received; `Terminated`: SIGTERM was."""
    if _state.received is not None and _state.raising:
        raise _exception(_state.received)


def handling() -> int:
    """The command is handling its interruption (it stops, cleans up and says so): from here a
    signal is only noted, so that work finishes. Returns the signal to report: the one received,
    else SIGINT (a `KeyboardInterrupt` raised without a signal, as tests do)."""
    _state.raising = False
    _state.handled = True
    return _state.received or signal.SIGINT


def run_command(command: Callable[[], Any]) -> Any:
    """`command()` (the CLI, which ends with `sys.exit`) under the handler (module docstring).

    Returns:
        what `command` returned, when it returned and no signal came.

    Raises:
        SystemExit: `command`'s own, or 128 + the signal when one was received (after saying so on
            stderr when the command had not handled it); from then on both signals are ignored,
            so none kills the interpreter as it shuts down.
    """
    if not _install():
        return command()
    outcome: BaseException | None = None
    result = None
    try:
        try:
            _state.raising = True
            result = command()
        except SystemExit as exc:
            outcome = exc
        finally:
            _state.raising = False
    except KeyboardInterrupt as exc:  # raised outside the command's own handling
        outcome = exc
    if _state.received is None and outcome is None:
        _restore()
        return result
    for signum in SIGNALS:  # signal.signal first runs a handler already due: it is noted
        signal.signal(signum, signal.SIG_IGN)
    if _state.received is None:
        if isinstance(outcome, SystemExit):
            raise outcome
        _state.received = signal.SIGINT  # a KeyboardInterrupt of no signal of ours
    if not _state.handled:
        name = signal.Signals(_state.received).name
        print(f"interrupted ({name}): stopped with exit status {128 + _state.received} (every output it wrote "
              "is whole; what it said above it wrote was written)", file=sys.stderr)
    raise SystemExit(128 + _state.received)


def _install() -> bool:
    """Our handler for SIGINT and SIGTERM, where Python's defaults are in place (a signal the
    parent set to be ignored, `nohup`, stays ignored) and this is the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return False
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    _state.received, _state.raising, _state.handled = None, False, False
    _state.installed = {}
    for signum, default in defaults.items():
        if signal.getsignal(signum) is default:
            _state.installed[signum] = signal.signal(signum, _on_signal)
    if _state.installed:
        _state.unraisable_hook, sys.unraisablehook = sys.unraisablehook, _unraisable
    return bool(_state.installed)


def _restore() -> None:
    for signum, previous in _state.installed.items():
        signal.signal(signum, previous)
    _state.installed = {}
    sys.unraisablehook = _state.unraisable_hook or sys.__unraisablehook__


def _in_child() -> None:
    """In a forked child (a sweep's worker): Python's default handlers, no signal noted (the
    pool's initializer then sets its own: `backends._init_worker`)."""
    if _state.installed:
        try:
            for signum, previous in _state.installed.items():
                signal.signal(signum, previous)
        except ValueError:  # not the main thread of the child: it keeps ours, which only notes
            pass
        _state.installed = {}
    _state.received, _state.raising, _state.handled = None, False, False


os.register_at_fork(after_in_child=_in_child)
