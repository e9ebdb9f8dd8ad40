"""Leftovers of killed processes: whether a pid is alive, and sweeping directories named after a dead owner.

A directory that a process may leave behind when it is killed with SIGKILL (a sandbox run directory, a
judge being written) carries its owner's pid in its name (``<prefix><pid>-...``); the next process to use
the same place removes those whose owner is gone. A live pid (even one we may not signal) is left alone.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def sweep_stale(parent: Path, prefix: str) -> list[Path]:
    """Remove the `prefix<pid>-*` entries of `parent` whose owning process is dead; returns what was removed."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)-")
    try:
        entries = list(Path(parent).iterdir())
    except OSError:
        return []
    removed = []
    for entry in entries:
        m = pattern.match(entry.name)
        if m and int(m.group(1)) != os.getpid() and not pid_alive(int(m.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed
