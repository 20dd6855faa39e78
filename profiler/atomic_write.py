"""Write a file whole or not at all: a temporary file in the target's folder, filled, flushed to
disk, then renamed over the target (`os.replace`, atomic on POSIX within one filesystem). A full
disk, a failing writer or a kill leaves the previous file (or none), never a truncated one.

The one such writer of the project: profile directories, measured tables, fit reports and
`roofline_fits.yaml` here; the results cache and `experiments.outputs.write_atomic` (which adds
run-folder manifests on top) above. It lives in `profiler/` because that is the lowest package
that writes files and is imported by every layer that does (`simulator`, `gpu_engine`,
`experiments`; `traces` writes through `experiments`, but for its profile builder, which uses
this one); a top-level package of its own
would need every editable install re-made (setuptools' editable finder maps the top-level names
it saw at install time). It imports nothing of the project, so any module may use it without an
import circle (tests/test_layout.py).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

# Temporary files start with this, so a run folder's claim can remove a killed run's leftovers
# (`experiments.outputs`) and tell them from a user's files.
TEMP_PREFIX = ".tmp-sarathi-"


class OutputWriteError(OSError):
    """An output file that could not be written (disk full, permissions); nothing partial is left.

    Attributes:
        path: the file that was not written.
        reason: the operating system's reason (e.g. "No space left on device").
    """

    def __init__(self, path: Path, reason: str, errno_: int | None = None):
        super().__init__(errno_, f"{path}: could not be written ({reason})")
        self.path = Path(path)
        self.reason = reason

    def __str__(self) -> str:
        return self.strerror


def write_whole(path: str | Path, write: Callable[[Path], None],
                before_rename: Callable[[], None] | None = None, temp_suffix: str | None = None) -> Path:
    """Write `path` whole or not at all: `write(tmp)` fills a temporary file (`TEMP_PREFIX`, by
    default the suffix of `path`) in `path`'s folder (created), which is flushed to disk, given the
    permissions of an ordinary new file (0666 less the umask; mkstemp makes it 0600), and renamed
    over `path`.

    Args:
        path: the file to write.
        write: called with the temporary path (an empty file exists there); writes the content.
        before_rename: called after the content is on disk, just before the rename (a run folder
            lists the file in its manifest then).
        temp_suffix: the temporary file's suffix; None: `path`'s, for writers that take the format
            from the name (matplotlib, pandas' compression). The results cache passes ".tmp" so that
            a half-written entry never looks like one.

    Returns:
        `path`.

    Raises:
        OutputWriteError: the folder or the temporary file cannot be created, or `write`, the
            flush, `before_rename` or the rename failed with an OSError (the temporary file is
            removed; the message names `path` and the system's reason). Any other exception from
            `write` or `before_rename` propagates unchanged, after the temporary file is removed.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=TEMP_PREFIX,
                                        suffix=path.suffix if temp_suffix is None else temp_suffix)
        os.close(fd)
    except OSError as exc:
        raise OutputWriteError(path, exc.strerror or str(exc), exc.errno) from exc
    tmp = Path(tmp_name)
    try:
        write(tmp)
        _flush_to_disk(tmp)  # a full disk may only say so here (delayed allocation, NFS)
        os.chmod(tmp, 0o666 & ~_UMASK)
        if before_rename is not None:
            before_rename()
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OutputWriteError(path, exc.strerror or str(exc), exc.errno) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_text_whole(path: str | Path, text: str) -> Path:
    """`write_whole` of UTF-8 text."""
    return write_whole(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_bytes_whole(path: str | Path, data: bytes) -> Path:
    """`write_whole` of bytes."""
    return write_whole(path, lambda tmp: tmp.write_bytes(data))


def _flush_to_disk(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()  # read once: os.umask can only be read by setting it
