"""Files written whole or not at all, for the project's scripts (experiments, examples).

A file is written to a temporary file of its own beside the target, flushed to disk and
renamed over the target: a failed or interrupted write leaves an older file whole and no
temporary behind, and two writers never share a temporary."""

from __future__ import annotations

import os
import tempfile
from typing import Callable, Union

PathLike = Union[str, "os.PathLike[str]"]


def replace_with(path: PathLike, write: Callable[[str], None], suffix: str = ".tmp") -> None:
    """Calls write(tmp) with the name of a new temporary file beside path (ending in suffix,
    for writers that read the format from it), then renames it over path; removes it if
    write or the rename fails."""
    target = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(target)),
                               prefix="." + os.path.basename(target) + ".", suffix=suffix)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_atomic(path: PathLike, data: Union[str, bytes]) -> None:
    """data (str as UTF-8, or bytes) to path through replace_with, flushed to disk before
    the rename."""
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
    replace_with(path, write)
