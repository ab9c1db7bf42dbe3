"""Helpers the sandbox tests share: what a fork bomb may have left behind on the host."""

from __future__ import annotations

import time
from pathlib import Path


def nobody_processes_left(wait_s: float = 10.0) -> list[Path]:
    """Live processes running as uid nobody, after waiting up to ``wait_s`` for them to go.

    The kernel kills a pid namespace's processes when its pid 1 exits; reaping may lag a moment on
    a busy machine, so a non-empty answer only counts after the wait.
    """
    deadline = time.monotonic() + wait_s
    while True:
        left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _alive_as_nobody(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _alive_as_nobody(proc: Path) -> bool:
    try:
        fields = dict(line.split(":", 1) for line in (proc / "status").read_text().splitlines() if ":" in line)
    except OSError:
        return False
    return fields.get("Uid", "").split()[:1] == ["65534"] and not fields.get("State", "").strip().startswith(("Z", "X"))
