"""The resumable results file of a batch: ``OUT/results.jsonl`` (+ ``OUT/config.json``).

* One JSON line per finished task, carrying its ``key``. Each line goes to the OS in one ``write`` as
  soon as the task finishes, so a killed process never loses a counted line; ``fsync`` (for an OS
  crash) runs by group commit in a worker thread, off the event loop.
* A rerun skips every key already in the file. The part after the last newline (a write torn by a
  kill) is cut off first, so the file stays parseable and that task simply runs again.
* ``OUT/config.json`` holds the batch's settings; the ``pinned`` ones (those that change what a run
  produces, e.g. budget and seed) must match for a rerun to continue in the same folder.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentrt.batch.tasks import BatchTask, check_keys
from agentrt.core.errors import ConfigError, InputError, RunError

RESULTS = "results.jsonl"
CONFIG = "config.json"


def read_results(path: str | Path, repair: bool = False) -> list[dict[str, Any]]:
    """The complete records of a results file; with ``repair``, a torn tail (killed mid-write) is cut off."""
    path = Path(path)
    if not path.is_file():
        return []
    raw = path.read_bytes()
    records, good = [], 0
    for line in raw.split(b"\n")[:-1]:  # the part after the last newline is incomplete by definition
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
        good += len(line) + 1
    if repair and good < len(raw):
        with open(path, "r+b") as f:
            f.truncate(good)
            os.fsync(f.fileno())
    return records


def pin_config(out: str | Path, config: dict[str, Any], pinned: Sequence[str]) -> None:
    """Write ``OUT/config.json``, or check that a resumed batch shares its ``pinned`` settings."""
    path = Path(out) / CONFIG
    if path.is_file():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ConfigError(f"{path} is corrupt (not JSON); delete it to start that folder over, "
                              "or use a new --out") from None
        for key in pinned:
            # A setting added after the folder was written is off there: an unset new value (False, None) matches.
            if key not in old and not config.get(key):
                continue
            if old.get(key) != config.get(key):
                raise InputError(f"{out} holds a run with {key}={old.get(key)!r}, not {config.get(key)!r}; "
                                 f"use the same {key} to resume, or a new --out")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(config, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)  # atomic: a kill never leaves a half-written config behind


class _GroupSync:
    """fsync a file in a worker thread, coalescing: at most one in flight, one more queued."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.dirty = False
        self.task: asyncio.Task | None = None

    def kick(self) -> None:
        self.dirty = True
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while self.dirty:
            self.dirty = False
            await asyncio.to_thread(os.fsync, self.fd)

    async def drain(self) -> None:
        if self.task is not None:
            await self.task
        if self.dirty:
            await self._run()


class ResultsFile:
    """``OUT/results.jsonl`` of one batch (see the module docstring).

    ``start(tasks)`` opens it (checking ``config`` against ``OUT/config.json`` on the ``pinned`` keys)
    and returns the tasks still to run; ``write(record)`` appends one finished task; ``finish()``
    waits for the last fsync and closes it. ``records`` holds every record, old and new.
    """

    def __init__(self, out: str | Path, *, config: dict[str, Any] | None = None, pinned: Sequence[str] = ()) -> None:
        self.out = Path(out)
        self.path = self.out / RESULTS
        self.config = dict(config or {})
        self.pinned = tuple(pinned)
        self.records: list[dict[str, Any]] = []
        self.done: set[str] = set()
        self._fh: Any = None
        self._sync: _GroupSync | None = None

    def start(self, tasks: Sequence[BatchTask]) -> list[BatchTask]:
        """Open the file for appending; returns the tasks whose key is not in it yet (in order)."""
        check_keys(tasks)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"cannot create the output folder {self.out} ({e.strerror}); "
                              "choose another --out") from None
        pin_config(self.out, self.config, self.pinned)
        self.records = read_results(self.path, repair=True)
        self.done = {r.get("key") for r in self.records}
        self._fh = open(self.path, "ab")
        self._sync = _GroupSync(self._fh.fileno())
        return [t for t in tasks if t.key not in self.done]

    def has(self, key: str) -> bool:
        """Whether ``key`` is already written (a task is never counted twice)."""
        return key in self.done

    def write(self, record: dict[str, Any]) -> bool:
        """Append one finished task's record (it must carry its ``key``); False if that key is already in."""
        if self._fh is None:
            raise RunError("ResultsFile.write() was called before start(); start the batch first")
        key = record["key"]
        if key in self.done:
            return False
        # One write() per record straight to the OS: a killed process never loses a counted line.
        self._fh.write((json.dumps(record, ensure_ascii=False, default=str) + "\n").encode())
        self._fh.flush()
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a thread without a loop (the Ray driver's): sync in place
            os.fsync(self._fh.fileno())
        else:
            self._sync.kick()  # type: ignore[union-attr]
        self.done.add(key)
        self.records.append(record)
        return True

    async def finish(self) -> None:
        """Wait for the pending fsync, then close the file."""
        if self._fh is None:
            return
        try:
            if self._sync is not None:
                await self._sync.drain()
        finally:
            self._fh.close()
            self._fh = None
