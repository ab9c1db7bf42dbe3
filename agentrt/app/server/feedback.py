"""``POST /v1/feedback``: a client's verdict on a response this server gave, the reward ``learn --traffic`` reads.

A verdict steers the router, so the door is narrow (issue 56, item 5):

* **Only responses this server served and stored.** The id is one the server issued (``chatcmpl-...`` from chat,
  ``resp_...`` from Responses) for a run whose record says it was served (``metadata.served``, set by
  ``request.served_metadata``). A ``cmpl-`` id (``/v1/completions``: no route was decided), a bare run id of a CLI
  or SDK run, and a response made with ``store: false`` (the client asked that nothing be kept) are 404s.
* **One verdict per response.** A second is a 409; the operator can still change it (``agentrt feedback`` on the
  host). So the verdicts never outnumber the runs served.
* **Bounded.** The body obeys ``--max-body`` (413); the note is at most ``MAX_NOTE`` characters (500); at most
  ``RATE`` verdicts a second on average (a burst of ``BURST``), else 429 with ``Retry-After``.
* **Behind the key**, like every path but ``/healthz`` (``door.ApiKeyGate``).
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agentrt.app.server.door import error_response, read_object
from agentrt.core.errors import UserError
from agentrt.trajectory.feedback import MAX_NOTE, AlreadyJudged, UnknownRun, record_feedback

if TYPE_CHECKING:
    from agentrt.app.agent import Agent
    from agentrt.trajectory.schema import TrajectoryRecord

RATE = 10.0  # verdicts per second, on average: a person or a labelling script, not a flood
BURST = 60
PREFIXES = ("chatcmpl-", "resp_")  # the ids the chat and Responses endpoints issue: the run id behind them
_RUN_ID = re.compile(r"[0-9a-f]{32}")  # trajectory.schema.new_run_id: anything else was never issued


class Bucket:
    """A token bucket: ``take()`` is 0 when a request may go now, else the seconds until one may."""

    def __init__(self, rate: float = RATE, burst: int = BURST, clock: Any = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, float(burst), clock
        self.tokens, self.at = float(burst), clock()

    def take(self) -> float:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


def served_run(record: TrajectoryRecord) -> str | None:
    """Why the server takes no verdict on ``record`` (None: it takes one)."""
    meta = record.metadata or {}
    if meta.get("endpoint") == "completions":
        return "no feedback on a /v1/completions response: it ran no route, so there is nothing to learn from it"
    if meta.get("served") != "server":
        return (f"run {record.run_id!r} was not served by `agentrt serve`; give feedback with the id of a chat "
                "completion or a response this server returned")
    if meta.get("store") is False:
        return (f"response {record.run_id!r} was made with store: false, so the server keeps no verdict on it; "
                "leave store out (or true) on requests you will give feedback on")
    return None


def register(app: FastAPI, agent: Agent, *, max_body: int, bucket: Bucket | None = None) -> None:
    """Add ``POST /v1/feedback`` to ``app`` (module docstring)."""
    bucket = bucket or Bucket()

    @app.post("/v1/feedback")
    async def feedback(request: Request) -> Any:
        """A user's verdict on a response (its ``id``): ``correct`` true/false or ``reward`` in [0, 1]."""
        wait = bucket.take()
        if wait:
            return error_response(429, f"too many verdicts: this server takes {RATE:g} a second (bursts of {BURST}); "
                                       f"retry in {wait:.1f} s", headers={"Retry-After": str(max(1, round(wait)))})
        data = await read_object(request, max_body)
        if isinstance(data, JSONResponse):
            return data
        rid = data.get("id")
        if not isinstance(rid, str):
            return error_response(400, "the body must be a JSON object with the response's \"id\" and \"correct\" "
                                       "or \"reward\"", param="id")
        correct, reward, note = data.get("correct"), data.get("reward"), data.get("note")
        if correct is not None and not isinstance(correct, bool):
            return error_response(400, "correct must be true or false", param="correct")
        if note is not None and not isinstance(note, str):
            return error_response(400, "note must be a string", param="note")
        if note is not None and len(note) > MAX_NOTE:
            return error_response(400, f"note is {len(note)} characters; the limit is {MAX_NOTE}", param="note")
        prefix = next((p for p in PREFIXES if rid.startswith(p)), None)
        if prefix is None or not _RUN_ID.fullmatch(rid[len(prefix):]):
            why = ("no feedback on a /v1/completions response: it ran no route, so there is nothing to learn from it"
                   if rid.startswith("cmpl-") else
                   f"no response {rid[:80]!r} from this server: give the \"id\" of a chat completion (chatcmpl-...) "
                   "or a response (resp_...) it returned")
            return error_response(404, why, param="id", code="run_not_found")
        try:
            entry = await asyncio.to_thread(
                record_feedback, agent.settings.trajectory_dir, rid, reward=reward, correct=correct,
                note=note or "", source="server", once=True, accept=served_run)
        except UnknownRun as e:
            return error_response(404, str(e), param="id", code="run_not_found")
        except AlreadyJudged as e:
            return error_response(409, str(e), param="id", code="feedback_exists")
        except UserError as e:
            return error_response(400, str(e), param="reward")
        return {"object": "feedback", "id": rid, **entry}


__all__ = ["BURST", "Bucket", "PREFIXES", "RATE", "register", "served_run"]
