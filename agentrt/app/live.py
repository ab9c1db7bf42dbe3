"""A live terminal for ``agentrt run``: the answer streams as the model writes it.

On a terminal (stdout a TTY, no ``--quiet``/``--json``) ``run_live`` shows, on stderr, the route as soon as
it is chosen and a one-line status (route, tokens spent of the budget, the step running) that is rewritten
in place while the run works; thoughts stream dimmed and the answer plainly on stdout, as in the REPL. A
route that trims what it streamed (a vote, a repaired tool answer) or a run without a real answer ends
with the run's own answer, so what stays on screen is what the run returned. Pipes and ``--quiet`` keep
the plain output of ``agentrt run`` (``wants_live`` says which).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from agentrt.app.terminal import printable
from agentrt.core.events import Answer, BudgetUpdate, RouteDecided, RunStarted, StepStarted, TokenDelta

DIM, RESET, CLEAR = "\x1b[2m", "\x1b[0m", "\r\x1b[K"


def no_answer_line(result: Any) -> str:
    """What a run without a real answer says in place of one (status and why; the partial text stays in the record)."""
    why = (getattr(result, "error", None) or "").removeprefix("no answer: ")
    return f"(no answer — status {result.status}{': ' + why if why else ''})"


def wants_live(args: Any, out: TextIO | None = None) -> bool:
    """Stream to the terminal: stdout is a TTY and the user asked for neither JSON nor quiet output."""
    out = out or sys.stdout
    return bool(getattr(out, "isatty", lambda: False)()) and not getattr(args, "json", False) \
        and not getattr(args, "quiet", False)


class LiveView:
    """Writes one run's events to a terminal (``out``: the answer and thoughts; ``err``: route and budget)."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out, self.err = out, err
        self.route, self.step, self.spent, self.total = "", "", 0, 0
        self.shown = ""  # answer text written so far
        self.in_thought = False
        self.status_on = False  # a status line is on screen (err), to be cleared before text

    def _status(self) -> None:
        if self.err.isatty():
            self.err.write(f"{CLEAR}{DIM}[{self.route or 'routing'} · {self.spent}/{self.total} tokens"
                           f"{' · ' + self.step if self.step else ''}]{RESET}")
            self.err.flush()
            self.status_on = True

    def _clear(self) -> None:
        if self.status_on:
            self.err.write(CLEAR)
            self.err.flush()
            self.status_on = False

    def update(self, event: Any) -> None:
        if isinstance(event, RunStarted):
            self.total, self.route = event.budget, event.route
            self._status()
        elif isinstance(event, RouteDecided):
            self.route = event.route
            self._clear()
            self.err.write(f"{DIM}route {event.route}{' — ' + printable(event.reason) if event.reason else ''}{RESET}\n")
            self._status()
        elif isinstance(event, StepStarted):
            self.step = event.name
            if not self.shown and not self.in_thought:
                self._status()
        elif isinstance(event, BudgetUpdate):
            self.spent, self.total = event.spent, event.total
            if not self.shown and not self.in_thought:
                self._status()
        elif isinstance(event, TokenDelta) and event.text:
            self._clear()
            if event.thought:
                self.in_thought = True
                self.out.write(f"{DIM}{printable(event.text)}{RESET}")
            else:
                if self.in_thought:
                    self.out.write("\n")
                    self.in_thought = False
                self.out.write(printable(event.text))  # a model's ESC sequences are shown, not obeyed
                self.shown += event.text
            self.out.flush()

    def finish(self, result: Any) -> None:
        """End the view with the run's answer (when it differs from what streamed) and a newline."""
        self._clear()
        if self.in_thought:
            self.out.write("\n")
        if result.answer.strip() != self.shown.strip():
            if self.shown.strip():  # the route trimmed or replaced what it streamed: say what it kept
                self.out.write(f"\n{DIM}(answer){RESET} ")
            self.out.write(printable(result.answer))
        if not result.answer:
            self.out.write(printable(no_answer_line(result)))
        self.out.write("\n")
        self.out.flush()


def run_live(events: Iterable[Any], out: TextIO | None = None, err: TextIO | None = None) -> Any:
    """Show a run's ``events`` (``agentrt.app.streaming.stream``: they end with ``Answer``) live; returns its Result."""
    view = LiveView(out or sys.stdout, err or sys.stderr)
    result = None
    for event in events:
        view.update(event)
        if isinstance(event, Answer):
            result = event.result
    view.finish(result)
    return result


__all__ = ["LiveView", "no_answer_line", "run_live", "wants_live"]
