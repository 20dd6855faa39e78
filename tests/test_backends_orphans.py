"""A local sweep's worker processes end with their driver, even when it is SIGKILLed (no
cleanup of its own runs): before, they were reparented and blocked for ever writing a finished
point's result to a pipe no one read (backends.end_with_parent)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc (Linux)")

# Two points long enough (tens of seconds each) that both workers are busy when the driver dies.
LONG = """
name: orphans
trace: {kind: poisson, qps: 40, num_requests: 60000, prompt_tokens: [100, 1500], output_tokens: [20, 200]}
engine: {scheduler: sarathi, chunk_size: 512}
variants:
  - {engine.chunk_size: [256, 1024]}
"""


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) of `pid`, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
    return fields[0], int(fields[1])


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[1] == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaped in this container has ended)."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def _wait(condition, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def test_workers_of_a_sigkilled_sweep_driver_end_within_seconds(tmp_path):
    config = tmp_path / "long.yaml"
    config.write_text(LONG)
    driver = subprocess.Popen([sys.executable, "-c", "from experiments.cli.main import app; app()", "sweep",
                               str(config), "--out", str(tmp_path / "out"), "--jobs", "2", "--no-cache"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        assert _wait(lambda: len(_children(driver.pid)) >= 2, 60), "the sweep started no 2 workers"
        time.sleep(1.0)  # both past their initializer, simulating
        workers = _children(driver.pid)
        assert all(_alive(w) for w in workers)
        os.kill(driver.pid, signal.SIGKILL)  # the driver's process alone, not its group
        driver.wait(10)
        assert _wait(lambda: not any(_alive(w) for w in workers), 5), \
            f"workers {[w for w in workers if _alive(w)]} outlived their driver"
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        for worker in workers:  # without the fix they would be left running
            if _alive(worker):
                os.kill(worker, signal.SIGKILL)


def test_the_portable_watch_exits_a_process_whose_parent_ended_without_the_kernel_signal(tmp_path):
    """The fallback where prctl is missing (not Linux): only the watching thread ends the child."""
    script = textwrap.dedent(f"""
        import os, sys, time
        from experiments.planning import backends
        child = os.fork()
        if child == 0:
            backends._set_parent_death_signal = lambda signum: False  # as on a system without prctl
            backends.end_with_parent(poll_s=0.05)
            time.sleep(60)
            os._exit(0)
        print(child, flush=True)
        time.sleep(60)
    """)
    middle = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = int(middle.stdout.readline())
    try:
        time.sleep(0.5)
        assert _alive(child)  # the watch does not end a child whose parent is there
        middle.kill()
        middle.wait(10)
        assert _wait(lambda: not _alive(child), 3)
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
        if middle.poll() is None:
            middle.kill()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_the_kernel_signal_is_set_on_linux():
    """prctl(PR_GET_PDEATHSIG = 2) reads back SIGKILL in a process that set it."""
    script = textwrap.dedent("""
        import ctypes, signal
        from experiments.planning import backends
        assert backends._set_parent_death_signal(signal.SIGKILL)
        value = ctypes.c_int(0)
        ctypes.CDLL(None).prctl(2, ctypes.byref(value), 0, 0, 0)
        print(value.value)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert int(out.stdout) == signal.SIGKILL == 9
