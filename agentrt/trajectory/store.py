"""The trajectory store: append-only JSONL, fsync per record, size-based rotation, an index by run id.

Layout of a trajectory directory::

    trajectories.jsonl              the active file (appends go here)
    trajectories.000001.jsonl ...   rotated files, oldest first
    trajectories.index.jsonl        {"run_id", "file", "offset", "length"} per record (derived data)
    .trajectories.jsonl.lock        the fcntl lock every writer takes

Why it is safe:

* Each record is ONE ``os.write`` of a whole line to a file opened with O_APPEND, then ``fsync``,
  under an exclusive ``flock`` on the lock file. Threads and processes therefore never interleave,
  and rotation (a rename) never happens under another writer's feet.
* A writer killed mid-write leaves a torn last line. The next writer (holding the lock) sees that the
  file does not end with a newline, terminates the torn line and writes a repair marker line after it.
  Readers report such a line in ``ReadReport.torn`` and skip it; a bad line WITHOUT the marker is real
  corruption: by default it is skipped and quarantined (``ReadReport.quarantined``: file, line, reason),
  so one damaged line never blocks the records around it; ``strict=True`` raises ``TrajectoryError``
  with its place instead. A torn last line is ``ReadReport.torn_tail``. Reading never writes.
* The lock is released by the kernel when a killed writer's process dies, so nothing waits forever.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentrt.core.errors import TrajectoryError
from agentrt.trajectory.schema import SUPPORTED_VERSIONS, TRAJECTORY_FILE, RewardBreakdown, TrajectoryRecord

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
REPAIR_KEY = "agentrt_repair"
FEEDBACK_FILE = "feedback.jsonl"  # users' verdicts on runs (agentrt.trajectory.feedback), joined in when read


def _names(filename: str) -> tuple[str, str]:
    stem = filename[: -len(".jsonl")] if filename.endswith(".jsonl") else filename
    return stem, f"{stem}.index.jsonl"


class TrajectoryWriter:
    """Append-only, fsync-per-record JSONL writer; safe across threads and processes.

    ``max_bytes``: when the active file reaches it, it is renamed to ``<stem>.NNNNNN.jsonl`` and a
    new one starts. ``index``: keep ``<stem>.index.jsonl`` so ``find_record`` seeks instead of scanning.
    """

    def __init__(self, directory: Path | str, filename: str | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 index: bool = True) -> None:

        filename = filename or TRAJECTORY_FILE
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.directory = Path(directory)
        self.filename = filename
        self.path = self.directory / filename
        self.stem, index_name = _names(filename)
        self.index_path = self.directory / index_name if index else None
        self.lock_path = self.directory / f".{filename}.lock"
        self.max_bytes = max_bytes

    def append(self, record: TrajectoryRecord) -> None:
        """Write one record durably (returns after fsync)."""
        line = (record.model_dump_json() + "\n").encode("utf-8")
        if not self.directory.is_dir():
            self.directory.mkdir(parents=True, exist_ok=True)
        with _locked(self.lock_path):
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                _terminate_torn_tail(fd, marker=True, path=self.path)
                end = append_whole(fd, line, self.path)  # a full disk: the file as it was, and one clear line
            finally:
                os.close(fd)
            self._index({"run_id": record.run_id, "file": self.filename, "offset": end - len(line), "length": len(line)})
            if end >= self.max_bytes:
                self._rotate()

    def _index(self, entry: dict) -> None:
        if self.index_path is None:
            return
        fd = os.open(self.index_path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _terminate_torn_tail(fd, marker=False, path=self.index_path)
            append_whole(fd, (json.dumps(entry) + "\n").encode(), self.index_path, sync=False)
        except TrajectoryError:
            pass  # derived data (the record itself is on disk): a missing entry costs find_record a scan
        finally:
            os.close(fd)

    def _rotate(self) -> None:
        """Rename the active file to the next sequence number (caller holds the lock)."""
        seqs = [seq for seq, _ in _rotated(self.directory, self.stem)]
        target = f"{self.stem}.{(max(seqs) + 1 if seqs else 1):06d}.jsonl"
        os.rename(self.path, self.directory / target)
        self._index({"rotated": self.filename, "to": target})


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _terminate_torn_tail(fd: int, *, marker: bool, path: Path | str = "the trajectory file") -> None:
    """If the file does not end with a newline, a writer died mid-line: end that line (and say so)."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    note = b"\n"
    if marker:
        note += (json.dumps({REPAIR_KEY: "torn_previous_line", "at": time.time(), "pid": os.getpid()}) + "\n").encode()
    append_whole(fd, note, path, sync=False)  # on a full disk: a TrajectoryError line, the torn line left as it was


def append_whole(fd: int, data: bytes, path: Path | str, *, sync: bool = True) -> int:
    """Append ``data`` to ``fd`` (opened O_APPEND, under the lock) whole or not at all; returns where it ends.

    A failed or short write, or a failed fsync (a full disk, a quota, an I/O error), cuts the file back to
    its size before the write, so no half line is left, and raises one ``TrajectoryError`` line saying so."""
    start = os.fstat(fd).st_size
    try:
        written = os.write(fd, data)
        if written != len(data):  # the disk filled mid-write: the kernel took what fit
            raise OSError(errno.ENOSPC, f"only {written} of {len(data)} bytes written")
        if sync:
            os.fsync(fd)
    except OSError as e:
        try:
            os.ftruncate(fd, start)
        except OSError:  # pragma: no cover - a file we cannot cut back: the next writer ends the torn line
            pass
        full = e.errno in (errno.ENOSPC, errno.EDQUOT)
        why = "the disk is full" if full else f"the write failed ({e.strerror or e})"
        raise TrajectoryError(f"cannot write to {path}: {why}; nothing was written (the file is as it was); "
                              + ("free disk space there, or point AGENTRT_HOME at another disk" if full else
                                 "check the disk and its permissions")) from None
    return start + len(data)


def _rotated(directory: Path, stem: str) -> list[tuple[int, Path]]:
    pattern = re.compile(rf"^{re.escape(stem)}\.(\d+)\.jsonl$")
    found = []
    for p in directory.glob(f"{stem}.*.jsonl"):
        m = pattern.match(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def trajectory_files(path: str | Path, filename: str | None = None) -> list[Path]:
    """The record files of a trajectory directory, oldest first (a file path is returned as is)."""

    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise TrajectoryError(f"no trajectory file or directory at {path}")
    filename = filename or TRAJECTORY_FILE
    stem, _ = _names(filename)
    files = [p for _, p in _rotated(path, stem)]
    if (path / filename).is_file():
        files.append(path / filename)
    return files


@dataclass(frozen=True)
class Quarantined:
    """A corrupt line that a reader skipped: where it is and what is wrong with it."""

    file: str
    line: int
    reason: str

    @property
    def place(self) -> str:
        return f"{self.file}:{self.line}"

    def __str__(self) -> str:
        return f"{self.place}: corrupt trajectory record ({self.reason}); skipped"


@dataclass
class ReadReport:
    """What reading trajectory files found: the complete records, and every problem, described."""

    records: list[TrajectoryRecord] = field(default_factory=list)
    torn_tail: str | None = None  # an incomplete last line (a writer was killed, or is writing now)
    torn: list[str] = field(default_factory=list)  # torn lines that a later writer terminated (skipped)
    files: list[str] = field(default_factory=list)
    quarantined: list[Quarantined] = field(default_factory=list)  # corrupt lines skipped (not strict)

    @property
    def problems(self) -> list[str]:
        return self.torn + ([self.torn_tail] if self.torn_tail else [])

    def quarantine_summary(self) -> str | None:
        """One line for a command's output ("skipped N corrupt lines (first: FILE:LINE)"), or None."""
        if not self.quarantined:
            return None
        n = len(self.quarantined)
        return f"skipped {n} corrupt line{'s' if n != 1 else ''} (first: {self.quarantined[0].place})"

    def absorb(self, other: ReadReport) -> ReadReport:
        """Add ``other`` (another path's report) to this one; returns self."""
        self.records += other.records
        self.files += other.files
        self.torn += other.torn
        self.quarantined += other.quarantined
        if other.torn_tail:
            if self.torn_tail is None:
                self.torn_tail = other.torn_tail
            else:
                self.torn.append(other.torn_tail)
        return self


def read_trajectories(path: str | Path, *, strict: bool = False) -> ReadReport:
    """Read every complete record of a file, or of a directory (rotated files first).

    Torn records are reported (``torn_tail``, ``torn``), never parsed. A bad line that no writer marked
    as torn is corruption: it is skipped and listed in ``quarantined`` (file, line, reason), or, with
    ``strict=True``, raises ``TrajectoryError`` with its file and line number. A record of a schema
    version this agentrt does not know always raises (upgrade agentrt; it is not corruption).
    """
    report = ReadReport()
    for file in trajectory_files(path):
        report.files.append(str(file))
        _read_file(file, report, strict)
    _join_feedback(Path(path) if Path(path).is_dir() else Path(path).parent, report.records)
    return report


def _join_feedback(directory: Path, records: list[TrajectoryRecord]) -> None:
    """Users' verdicts (``feedback.jsonl`` beside the records, written by agentrt.trajectory.feedback) as rewards."""
    verdicts = read_feedback(directory)
    for record in records if verdicts else []:
        if record.run_id in verdicts:
            join_feedback(record, verdicts[record.run_id])


def read_feedback(directory: str | Path) -> dict[str, dict[str, Any]]:
    """The latest verdict per run id in ``directory``. Each verdict is one whole-line write, so a line that
    does not parse is one a killed writer tore (terminated by the next writer): it is skipped."""
    path = Path(directory) / FEEDBACK_FILE
    if not path.is_file():
        return {}
    out: dict[str, dict[str, Any]] = {}
    for raw in path.read_bytes().split(b"\n"):
        try:
            entry = json.loads(raw)
            run_id, score = str(entry["run_id"]), float(entry["score"])
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError):
            continue
        out[run_id] = {**entry, "run_id": run_id, "score": score}
    return out


def join_feedback(record: TrajectoryRecord, entry: dict[str, Any]) -> None:
    """Put a verdict into ``record``: ``rewards["feedback"]`` and the run's ``reward``."""
    correct = entry.get("correct")
    record.rewards = {**record.rewards, "feedback": RewardBreakdown(
        score=float(entry["score"]), correct=None if correct is None else bool(correct),
        reason=str(entry.get("note") or ""), verifier=f"feedback:{entry.get('source', '')}")}
    record.reward = float(entry["score"])


def _read_file(path: Path, report: ReadReport, strict: bool) -> None:
    lines = path.read_bytes().split(b"\n")
    last = lines.pop()  # b"" when the file ends with a newline
    pending_bad: tuple[int, str] | None = None

    def corrupt(number: int, reason: str) -> None:
        if strict:
            raise TrajectoryError(f"{path}:{number}: corrupt trajectory record ({reason}); "
                                  "restore the file from a backup or remove that line (or read without --strict "
                                  "to skip it)")
        report.quarantined.append(Quarantined(str(path), number, reason))

    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        if raw.startswith(b'{"' + REPAIR_KEY.encode()):
            if pending_bad is not None:
                report.torn.append(f"{path}: line {pending_bad[0]} is a torn record (a writer was killed mid-record); skipped")
                pending_bad = None
            continue
        if pending_bad is not None:
            corrupt(*pending_bad)
            pending_bad = None
        try:
            report.records.append(parse_record(raw, path, number))
        except _Corrupt as e:
            pending_bad = (number, str(e))
    if pending_bad is not None:
        corrupt(*pending_bad)
    if last:
        report.torn_tail = (f"{path}: line {len(lines) + 1} is incomplete ({len(last)} bytes, no newline): "
                            "a writer was killed mid-record (or is still writing)")


class _Corrupt(Exception):
    pass


def parse_record(raw: bytes | str, path: Path | str = "<bytes>", number: int = 0) -> TrajectoryRecord:
    """Parse one line; an unsupported schema version raises TrajectoryError, a bad line ``_Corrupt``."""

    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _Corrupt(type(e).__name__) from None
    except (RecursionError, ValueError) as e:  # absurd nesting, a 5000-digit number
        raise _Corrupt(type(e).__name__) from None
    if not isinstance(obj, dict):
        raise _Corrupt("not a JSON object")
    if "schema_version" not in obj:
        raise _Corrupt("no schema_version: not a trajectory record")
    version = str(obj.get("schema_version"))
    if version not in SUPPORTED_VERSIONS:
        raise TrajectoryError(
            f"{path}:{number}: schema_version {version!r} is not supported by this agentrt "
            f"(supported: {sorted(SUPPORTED_VERSIONS)}); upgrade agentrt"
        )
    try:
        return TrajectoryRecord.model_validate(obj)
    except ValidationError as e:
        err = e.errors()[0]
        raise _Corrupt(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}") from None


def iter_records(path: str | Path, *, strict: bool = False) -> Iterator[TrajectoryRecord]:
    """Every complete record (torn and corrupt lines skipped unless ``strict``; ``read_trajectories``
    gives the report of what was skipped)."""
    yield from read_trajectories(path, strict=strict).records


def _load_index(directory: Path, filename: str) -> dict[str, tuple[str, int, int]]:
    stem, index_name = _names(filename)
    index_path = directory / index_name
    entries: dict[str, tuple[str, int, int]] = {}
    if not index_path.is_file():
        return entries
    for raw in index_path.read_bytes().split(b"\n"):
        try:
            e = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue  # derived data: a torn line costs a scan, nothing else
        if not isinstance(e, dict):
            continue
        if "rotated" in e:  # everything indexed so far in the active file now lives in e["to"]
            entries = {k: ((e["to"], o, n) if f == e["rotated"] else (f, o, n)) for k, (f, o, n) in entries.items()}
        elif "run_id" in e:
            entries[e["run_id"]] = (e["file"], int(e["offset"]), int(e["length"]))
    return entries


def find_record(path: str | Path, run_id: str, filename: str | None = None) -> TrajectoryRecord | None:
    """The record of ``run_id``: by the index when ``path`` is a directory, else by scanning."""

    path = Path(path)
    if path.is_dir():
        hit = _load_index(path, filename or TRAJECTORY_FILE).get(run_id)
        if hit is not None:
            file, offset, length = hit
            try:
                with open(path / file, "rb") as f:
                    f.seek(offset)
                    raw = f.read(length)
                record = parse_record(raw, path / file)
                if record.run_id == run_id:
                    return record
            except (OSError, _Corrupt):
                pass  # stale index: fall back to a scan
    needle = json.dumps(run_id).encode()  # parse only the lines that mention the id
    for file in trajectory_files(path):
        for number, raw in enumerate(file.read_bytes().split(b"\n")[:-1], start=1):
            if needle in raw:
                try:
                    record = parse_record(raw, file, number)
                except _Corrupt:
                    continue  # a torn line; read_trajectories reports it
                if record.run_id == run_id:
                    return record
    return None


def rebuild_index(directory: str | Path, filename: str | None = None) -> int:
    """Rewrite the index from the record files (e.g. after copying files around); returns its size."""

    directory = Path(directory)
    filename = filename or TRAJECTORY_FILE
    _, index_name = _names(filename)
    entries = []
    with _locked(directory / f".{filename}.lock"):
        for file in trajectory_files(directory, filename):
            offset = 0
            for raw in file.read_bytes().split(b"\n")[:-1]:
                length = len(raw) + 1
                try:
                    obj = json.loads(raw)
                    if isinstance(obj, dict) and "run_id" in obj:
                        entries.append({"run_id": obj["run_id"], "file": file.name, "offset": offset, "length": length})
                except (json.JSONDecodeError, UnicodeDecodeError):
                    pass
                offset += length
        tmp = directory / f"{index_name}.tmp-{os.getpid()}"
        tmp.write_text("".join(json.dumps(e) + "\n" for e in entries))
        os.replace(tmp, directory / index_name)
    return len(entries)
