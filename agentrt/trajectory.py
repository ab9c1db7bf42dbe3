"""Trajectories: one JSON record per run, appended to a JSONL file that survives a killed process.

Writing: each record is one ``os.write`` of a whole line to a file opened with O_APPEND, then
``fsync``; a crash can only leave a torn *last* line. Reading: a line without its newline, or one
that is not a valid record, is reported (``ReadReport.torn_tail`` / ``TrajectoryError``), never
silently parsed.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentrt.errors import TrajectoryError

SCHEMA_VERSION = "0"
SUPPORTED_VERSIONS = {"0"}
TRAJECTORY_FILE = "trajectories.jsonl"

Status = Literal["ok", "truncated", "failed", "cancelled"]


class ModelCallStep(BaseModel):
    """One model call, with what a trainer needs to learn from it."""

    kind: Literal["model_call"] = "model_call"
    name: str = Field(description="what the call was for: answer, think, ...")
    backend: str
    messages: list[dict[str, str]]
    prompt_token_ids: list[int] | None
    completion_token_ids: list[list[int]]
    completion_logprobs: list[list[float] | None]
    completions: list[str]
    finish_reasons: list[str]
    usage: dict[str, int]
    params: dict[str, Any] = {}
    latency_s: float


class RouteStep(BaseModel):
    """The router's decision, with the probability it gave the chosen route (the propensity)."""

    kind: Literal["route_decision"] = "route_decision"
    route: str
    propensity: float
    probabilities: dict[str, float] = {}
    reason: str = ""
    features: dict[str, Any] = {}


class TrajectoryRecord(BaseModel):
    """One run. Extra fields from later schema versions are kept, not dropped."""

    model_config = ConfigDict(extra="allow")

    schema_version: str = SCHEMA_VERSION
    run_id: str
    created_at: float
    question: str
    route: str
    steps: list[dict[str, Any]]
    answer: str
    thought: str | None = None
    budget: dict[str, int]
    usage: dict[str, int]
    timings: dict[str, float]
    status: Status
    error: str | None = None


def new_run_id() -> str:
    return uuid.uuid4().hex


class TrajectoryWriter:
    """Append-only, fsync-per-record JSONL writer. Safe across threads and processes (O_APPEND)."""

    def __init__(self, directory: Path, filename: str = TRAJECTORY_FILE) -> None:
        self.path = Path(directory) / filename

    def append(self, record: TrajectoryRecord) -> None:
        line = (record.model_dump_json() + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(fd, line)
            if written != len(line):  # pragma: no cover - disk full; never leave a silent half line
                raise TrajectoryError(f"short write to {self.path} ({written}/{len(line)} bytes)")
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass
class ReadReport:
    """What reading a trajectory file found."""

    records: list[TrajectoryRecord] = field(default_factory=list)
    torn_tail: str | None = None  # description of an incomplete last line, if any


def read_trajectories(path: str | Path) -> ReadReport:
    """Read every complete record. A torn last line is reported in ``torn_tail``; a bad line in the
    middle of the file (real corruption) raises ``TrajectoryError`` with its line number."""
    path = Path(path)
    if not path.is_file():
        raise TrajectoryError(f"no trajectory file at {path}")
    report = ReadReport()
    data = path.read_bytes()
    lines = data.split(b"\n")
    last = lines.pop()  # b"" when the file ends with a newline
    for number, raw in enumerate(lines, start=1):
        report.records.append(_parse(raw, path, number))
    if last:
        report.torn_tail = f"{path}: line {len(lines) + 1} is incomplete ({len(last)} bytes, no newline): a writer was killed mid-record"
    return report


def iter_records(path: str | Path) -> Iterator[TrajectoryRecord]:
    yield from read_trajectories(path).records


def find_record(path: str | Path, run_id: str) -> TrajectoryRecord | None:
    for record in iter_records(path):
        if record.run_id == run_id:
            return record
    return None


def _parse(raw: bytes, path: Path, number: int) -> TrajectoryRecord:
    try:
        obj = json.loads(raw)
        version = str(obj.get("schema_version"))
        if version not in SUPPORTED_VERSIONS:
            raise TrajectoryError(
                f"{path}:{number}: schema_version {version!r} is not supported by this agentrt "
                f"(supported: {sorted(SUPPORTED_VERSIONS)}); upgrade agentrt"
            )
        return TrajectoryRecord.model_validate(obj)
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, ValidationError) as e:
        raise TrajectoryError(f"{path}:{number}: corrupt trajectory record ({type(e).__name__})") from None


def now() -> float:
    return time.time()
