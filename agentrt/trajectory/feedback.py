"""User feedback on runs: append-only records beside the trajectories, joined in as rewards when read.

A run's record is written once, when the run ends; a user's verdict comes later (seconds or days), from
another process (``agentrt feedback``, the server's ``POST /v1/feedback``, the REPL's ``/good`` ``/bad``,
``Agent.feedback``). Rewriting the record would break "append-only", so a verdict is its own line in
``feedback.jsonl`` in the trajectory directory (one ``os.write`` under the store's lock, then fsync: a killed
process loses nothing, and never half a line), and ``read_trajectories`` (agentrt.trajectory.store) joins it into the record as
``rewards["feedback"]`` and ``reward`` (the latest verdict on a run wins). A run with feedback is learnable
(``agentrt learn --traffic``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

from agentrt.core.errors import InputError
from agentrt.trajectory.schema import TRAJECTORY_FILE, TrajectoryRecord
from agentrt.trajectory.store import (FEEDBACK_FILE, _locked, _terminate_torn_tail, append_whole, find_record,
                                      read_feedback)

__all__ = ["AlreadyJudged", "FEEDBACK_FILE", "MAX_NOTE", "SOURCES", "UnknownRun", "read_feedback", "record_feedback",
           "verdict"]

SOURCES = ("sdk", "cli", "server", "repl", "verifier")
MAX_NOTE = 500  # characters of a verdict's note: a verdict line stays under ~1 KB


class UnknownRun(InputError):
    """No run with that id in the store (or none the caller may give a verdict on)."""


class AlreadyJudged(InputError):
    """The run already has a verdict and the caller may give only one (the server's ``POST /v1/feedback``)."""


def verdict(reward: float | None = None, correct: bool | None = None) -> tuple[float, bool | None]:
    """The (score, correct) a feedback call means: ``correct`` alone scores 1 or 0; ``reward`` alone is a
    score in [0, 1]; both: the score, with the verdict beside it. Neither, or a reward out of range: InputError."""
    if reward is None and correct is None:
        raise InputError("feedback needs a verdict: correct=True/False (--right/--wrong) or reward=X in [0, 1]")
    if reward is not None:
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not 0.0 <= float(reward) <= 1.0:
            raise InputError(f"reward must be a number in [0, 1], got {reward!r}")
        return float(reward), correct
    return float(bool(correct)), bool(correct)


def record_feedback(directory: str | Path, run_id: str, *, reward: float | None = None, correct: bool | None = None,
                    source: str = "sdk", note: str = "", once: bool = False,
                    accept: Callable[[TrajectoryRecord], str | None] | None = None) -> dict[str, Any]:
    """Append a verdict on ``run_id`` (which must be a run recorded in ``directory``); returns the line written.

    An unknown run id is an ``UnknownRun`` (an InputError) that says where it looked. ``accept``: a further rule on
    the run's record (the server's: a run it served and may take a verdict on), returning why not or None; a refusal
    is an ``UnknownRun`` too. ``once``: a run that already has a verdict is an ``AlreadyJudged`` (checked under the
    store's lock, so two verdicts racing on one run leave one)."""
    score, correct = verdict(reward, correct)
    directory = Path(directory)
    run_id = str(run_id or "").strip()
    for prefix in ("chatcmpl-", "cmpl-", "resp_"):  # the server's response ids are the run id behind these prefixes
        run_id = run_id.removeprefix(prefix)
    record = find_record(directory, run_id) if run_id and directory.is_dir() else None
    if record is None:
        raise UnknownRun(f"no run {run_id!r} in {directory}; give the run id that `agentrt run --json` "
                         "(trajectory_id), the SDK (Result.trajectory_id) or the server (response id) returned")
    refused = accept(record) if accept is not None else None
    if refused:
        raise UnknownRun(refused)
    entry = {"run_id": run_id, "score": score, "correct": correct, "source": source, "note": note[:MAX_NOTE],
             "at": round(time.time(), 3)}
    line = (json.dumps(entry) + "\n").encode()
    with _locked(directory / f".{TRAJECTORY_FILE}.lock"):
        if once and run_id in read_feedback(directory):
            raise AlreadyJudged(f"run {run_id!r} already has a verdict; the server takes one per response (the "
                                "operator can change it: agentrt feedback RUN_ID on the server's host)")
        fd = os.open(directory / FEEDBACK_FILE, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _terminate_torn_tail(fd, marker=False, path=directory / FEEDBACK_FILE)
            append_whole(fd, line, directory / FEEDBACK_FILE)  # a full disk: one clear line, no half line
        finally:
            os.close(fd)
    return entry
