"""Where a sweep's points run: worker processes on this machine, or tasks on a Ray cluster.

Both give the part of `concurrent.futures.Executor` the sweep uses: `submit(fn, *args)` returning
a `concurrent.futures.Future`, and a context manager that waits for (or releases) the workers.
The work functions are the same either way (`experiments.planning.sweep._safe_run` and friends), so a
point's result does not depend on the backend.
"""
from __future__ import annotations

import atexit
import os
import signal
import socket
import sys
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Callable

BACKENDS = ("local", "ray")


class BackendError(RuntimeError):
    """A backend that cannot start (Ray missing, or its cluster unreachable); the message says how to fix it."""


def make_pool(backend: str, jobs: int, ray_address: str | None = None):
    """An executor for `backend`.

    Args:
        backend: `local` (a `ProcessPoolExecutor` of `jobs` processes) or `ray` (`RayPool`).
        jobs: local worker processes; Ray places tasks on the cluster's CPUs itself.
        ray_address: Ray cluster to join (`ray.init(address=...)`, e.g. `auto` or
            `ray://head:10001`); None starts a Ray instance on this machine.

    Raises:
        BackendError: an unknown backend, or Ray missing or unreachable (`check_available`).
    """
    check_available(backend, ray_address)
    if backend == "local":
        return LocalPool(max_workers=jobs, initializer=_init_worker)
    return RayPool(ray_address)


def _init_worker() -> None:
    """In a worker: Ctrl-C is the driver's to handle (it stops the pool and says what was kept;
    a worker that took it too would print its own traceback), and the worker ends with its
    driver (`end_with_parent`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with_parent()


# prctl(2) option: the signal the kernel sends this process when its parent ends
# (<linux/prctl.h>: #define PR_SET_PDEATHSIG 1).
_PR_SET_PDEATHSIG = 1
ORPHAN_POLL_S = 0.5  # how often the portable watch looks for a new parent


def end_with_parent(poll_s: float = ORPHAN_POLL_S) -> None:
    """End this process (a pool worker) when the process that started it ends, even by SIGKILL.

    A driver killed outright runs no cleanup; its workers were reparented (to PID 1 or a
    subreaper) and, having finished their point, blocked for ever writing a result to a pipe no
    one reads (the other workers hold its read end open). On Linux the kernel kills the worker
    when its parent ends (`prctl(PR_SET_PDEATHSIG, SIGKILL)`, prctl(2); the results cache
    writes entries whole, so nothing partial is kept); everywhere, a daemon thread also exits it
    within `poll_s` of `os.getppid()` changing (`_exit_when_orphaned`; a pipe write blocks
    without the GIL, so the thread runs). A parent already gone before the call counts as ended.
    The kernel's "parent" is the thread that forked the worker: `ProcessPoolExecutor` forks its
    workers in the thread that submits, and the sweep submits and collects in one thread that
    outlives the pool (`sweep._run_all`).
    """
    parent = os.getppid()
    _set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent:  # it ended between the fork and the prctl: the kernel sends nothing
        os._exit(1)
    threading.Thread(target=_exit_when_orphaned, args=(parent, poll_s), name="exit-when-orphaned",
                     daemon=True).start()


def _set_parent_death_signal(signum: int) -> bool:
    """`prctl(PR_SET_PDEATHSIG, signum)` through libc where there is one (Linux); whether it took."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # only pool workers need it, not every command's start-up

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0
    except (OSError, AttributeError):  # no libc to load, or no prctl in it
        return False


def _exit_when_orphaned(parent: int, poll_s: float) -> None:
    """Exit the process (status 1, no cleanup: its parent, the only reader of its results, is
    gone) once `os.getppid()` is no longer `parent`."""
    while os.getppid() == parent:
        time.sleep(poll_s)
    os._exit(1)


class LocalPool(ProcessPoolExecutor):
    """Worker processes that stop at once when the sweep is interrupted or fails: leaving the
    block on an exception cancels the points not started and ends the running ones (their
    results cache entries are written whole or not at all, so nothing partial is kept),
    instead of `ProcessPoolExecutor`'s wait for every queued point."""

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            return super().__exit__(exc_type, exc, tb)
        for process in list((self._processes or {}).values()):
            process.terminate()
        self.shutdown(wait=False, cancel_futures=True)
        return False


def check_available(backend: str, ray_address: str | None = None) -> None:
    """Fail early (before any output is written) when `backend` cannot run here.

    Raises:
        BackendError: an unknown backend, `--ray-address` without Ray, Ray not installed, or a
            `host:port` address nothing listens on (Ray itself would retry it for minutes).
    """
    if backend not in BACKENDS:
        raise BackendError(f"--backend {backend!r}: valid values are {', '.join(BACKENDS)}")
    if backend != "ray":
        if ray_address is not None:
            raise BackendError("--ray-address is only used with --backend ray")
        return
    _import_ray()
    if ray_address and not ray_address.startswith("ray://") and ray_address != "auto":
        host, _, port = ray_address.rpartition(":")
        if not port.isdigit():
            raise BackendError(f"--ray-address {ray_address!r}: expected auto, HOST:PORT or ray://HOST:PORT")
        try:
            socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
        except OSError as exc:
            raise BackendError(f"--ray-address {ray_address}: nothing reachable there ({exc}); "
                               "is the Ray head node running (`ray start --head`)?") from None


def _import_ray():
    try:
        import ray
    except ImportError as exc:
        raise BackendError("--backend ray needs Ray: pip install 'sarathi-sim[ray]' "
                           "(or pip install 'ray>=2.9')") from exc
    return ray


class RayPool:
    """Runs submitted calls as Ray tasks (one CPU each, no retries: a point's own error is its
    result, and a crashed worker should fail the sweep loudly rather than run a point twice).

    Every node needs sarathi-sim installed at the same version as the driver (the results
    cache key includes the version). The results cache folder is written by the workers, so on a
    multi-node cluster put `--out` on a shared filesystem for an interrupted sweep to resume.
    A point's row comes back to the driver; its record files are written into the run folder
    by a worker that sees it, else sent back as Parquet bytes that the driver writes there
    (`experiments.planning.records_spool`).
    """

    def __init__(self, address: str | None = None):
        ray = _import_ray()
        self._ray = ray
        if not ray.is_initialized():  # once per process: a capacity run opens several pools
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = address or "a new local instance"
                raise BackendError(f"--backend ray: cannot start or reach Ray at {where} ({exc})") from exc
            atexit.register(ray.shutdown)
        self._remotes: dict[Callable, Any] = {}

    def submit(self, fn: Callable, *args: Any) -> Future:
        remote = self._remotes.get(fn)
        if remote is None:
            remote = self._remotes[fn] = self._ray.remote(num_cpus=1, max_retries=0)(fn)
        return remote.remote(*args).future()

    def __enter__(self) -> "RayPool":
        return self

    def __exit__(self, *exc_info) -> None:
        """Nothing to wait for: the sweep collects every future before leaving the block."""
