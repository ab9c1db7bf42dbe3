"""``agentrt chat``: a terminal chat with the agent (rich).

Each turn shows the route decision and its reason, the plan, the model calls (parallel searchers
appear as concurrent lines), the text as the model writes it (thoughts dimmed, the answer plain), a
live budget bar, then the answer and its sources. Slash commands change
the next turns (/route, /budget) or inspect the last one (/plan, /trace). Ctrl-C cancels the running
turn (its trajectory is saved with status "cancelled"); Ctrl-D or /exit leaves.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.markup import escape
from rich.text import Text

from agentrt.app.live import no_answer_line
from agentrt.app.terminal import printable
from agentrt.app.agent import Agent
from agentrt.core.errors import AgentrtError, UserError
from agentrt.app.streaming import (Answer, BudgetUpdate, Event, Plan, PlanApproved, RouteDecided, RunStarted, StepFinished,
                            StepStarted, TokenDelta, ToolCall)
from agentrt.core.types import ROUTES

HELP = """\
/route [NAME|auto]  force a route for the next turns (auto: the router decides)
/budget [N]         token budget per turn
/plan               the last turn's plan
/memory             what the conversation remembers (the prior turns sent as context)
/trace              the last turn's steps (trajectory id, calls, tokens)
/good  /bad         the last answer was right / wrong (recorded as its reward, for `agentrt learn --traffic`)
/save [PATH]        save the conversation as JSON lines
/reset              forget the conversation
/help               this help;  /exit (or Ctrl-D) leaves;  Ctrl-C cancels a running turn"""
THOUGHT_LINES = 6  # the live view shows the end of a long thought, not all of it


class TurnView:
    """The live view of one turn, updated from its events."""

    def __init__(self, question: str) -> None:
        self.question = question
        self.run_id = ""
        self.route = ""
        self.reason = ""
        self.plan: dict[str, Any] | None = None
        self.approved: bool | None = None
        self.steps: list[list[Any]] = []  # [name, state, tokens]
        self.tools: list[ToolCall] = []
        self.spent, self.total = 0, 0
        self.answer: Answer | None = None
        self.thought = ""  # thought text as it streams (thinking, plans, searchers)
        self.said, self.said_route = "", ""  # the answer text as it streams, and the route writing it

    def update(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.run_id, self.route, self.total = event.run_id, event.route, event.budget
        elif isinstance(event, RouteDecided):
            self.route, self.reason = event.route, event.reason
        elif isinstance(event, Plan):
            self.plan = event.plan
        elif isinstance(event, PlanApproved):
            self.approved = event.approved
        elif isinstance(event, StepStarted):
            self.steps.append([event.name, "running", 0])
        elif isinstance(event, StepFinished):
            for step in self.steps:  # the oldest running step of that name (parallel searchers)
                if step[0] == event.name and step[1] == "running":
                    step[1], step[2] = "done", event.usage.get("total_tokens", 0)
                    break
            else:
                self.steps.append([event.name, event.kind, 0])
        elif isinstance(event, ToolCall):
            self.tools.append(event)
        elif isinstance(event, TokenDelta):
            if event.thought:
                self.thought += event.text
            else:
                if event.route != self.said_route:  # a cascade's stronger route answers afresh
                    if self.said:
                        self.thought += f"\n[{self.said_route}] {self.said}\n"
                    self.said, self.said_route = "", event.route
                self.said += event.text
        elif isinstance(event, BudgetUpdate):
            self.spent, self.total = event.spent, event.total
        elif isinstance(event, Answer):
            self.answer = event

    def __rich__(self) -> Group:
        parts: list[Any] = []
        if self.route:
            parts.append(Text.assemble((f"route {self.route}", "bold cyan"),
                                       (f"  ({printable(self.reason)})" if self.reason else "", "dim")))
        if self.plan is not None:
            state = "" if self.approved is None else ("  approved" if self.approved else "  rejected")
            parts.append(Text(printable(f"plan{state}: {json.dumps(self.plan, ensure_ascii=False)[:400]}"), style="magenta"))
        running = sum(1 for s in self.steps if s[1] == "running")
        for name, state, tokens in self.steps[-8:]:
            mark = "…" if state == "running" else "✓"
            parts.append(Text(printable(f"  {mark} {name}" + (f"  {tokens} tok" if tokens else "")), style="dim"))
        if running > 1:
            parts.append(Text(f"  {running} calls in parallel", style="yellow"))
        for t in self.tools[-5:]:
            parts.append(Text(printable(f"  tool {t.name}({json.dumps(t.args, ensure_ascii=False)[:80]})"), style="blue"))
        thought = self.thought.strip()
        if thought:
            parts.append(Text(printable("\n".join(thought.splitlines()[-THOUGHT_LINES:])[-THOUGHT_LINES * 120:]), style="dim"))
        if self.answer is not None:  # the run's answer (a route may trim what it streamed)
            r = self.answer.result
            parts.append(Panel(Text(printable(r.answer or no_answer_line(r))), title="answer", title_align="left",
                               style="" if r.answer else "yellow"))
        elif self.said.strip():
            parts.append(Text(printable(self.said.strip())))
        if self.total:
            bar = Table.grid(padding=(0, 1))
            bar.add_row(Text("budget"), ProgressBar(total=self.total, completed=self.spent, width=30),
                        Text(f"{self.spent}/{self.total} tokens"))
            parts.append(bar)
        return Group(*parts)


class Repl:
    """The chat loop. ``run()`` returns when the user leaves."""

    def __init__(self, agent: Agent, *, console: Console | None = None, budget: int | None = None,
                 route: str | None = None, approve_plans: bool = False) -> None:
        self.agent = agent
        self.console = console or Console(highlight=False)
        self.session = agent.session(budget=budget)
        self.budget = budget or agent.settings.budget
        self.route = route
        self.approve_plans = approve_plans
        self.last: TurnView | None = None
        self.history_file = agent.settings.home / "chat_history"

    def run(self) -> int:
        if sys.stdin.isatty():
            # Started from a non-interactive shell's background job, the process inherits SIGINT ignored and
            # Python then never raises KeyboardInterrupt; at a terminal, Ctrl-C must cancel the turn.
            signal.signal(signal.SIGINT, signal.default_int_handler)
        self._history()
        self.console.print(f"[bold]agentrt chat[/] on {escape(printable(self.agent.settings.policy))} — /help for commands, "
                           "Ctrl-D to leave")
        while True:
            try:
                line = input("you> ").strip()
            except EOFError:
                self.console.print()
                return 0
            except KeyboardInterrupt:
                self.console.print()
                continue
            if not line:
                continue
            if line.startswith("/"):
                if self.command(line) == "exit":
                    return 0
                continue
            self.turn(line)

    def turn(self, question: str) -> None:
        view = TurnView(question)
        self.last = view
        options: dict[str, Any] = {"budget": self.budget, "route": self.route, "ask_user": self._ask_user}
        if self.approve_plans:
            options["approve_plan"] = self._approve_plan

        async def consume(live: Live) -> None:
            async for event in self.session.astream(question, **options):
                view.update(event)
                live.refresh()  # every token shows as it arrives

        try:
            with Live(view, console=self.console, refresh_per_second=8, transient=False) as live:
                asyncio.run(consume(live))
        except KeyboardInterrupt:
            self.console.print(f"[yellow]cancelled[/] (trajectory {view.run_id or '?'} saved as cancelled)")
            return
        except UserError as e:
            self.console.print(f"[red]error:[/] {escape(printable(e))}")
            return
        except AgentrtError as e:
            self.console.print(f"[red]failed:[/] {escape(printable(e))}")
            return
        self._show_answer(view)

    def _show_answer(self, view: TurnView) -> None:
        if view.answer is None:
            return
        r = view.answer.result  # the answer itself is in the live view's last frame
        sources = [f"passage {c}" for c in getattr(r, "citations", None) or []]
        # what a tool was asked, not what it returned: raw results (search's <document> blocks) are no source line
        sources += [f"{t.name}({json.dumps(t.args, ensure_ascii=False)[:80]})" + (" failed" if t.error else "")
                    for t in view.tools]
        if sources:
            self.console.print("sources:", style="bold")
        for i, src in enumerate(sources, 1):
            self.console.print(printable(f"  [{i}] {src}"), style="blue", markup=False)
        self.console.print(f"[dim]route={r.route} tokens={r.usage.total_tokens}/{r.budget} status={r.status} "
                           f"trajectory={r.trajectory_id}[/]")

    def command(self, line: str) -> str | None:
        name, _, arg = line.partition(" ")
        arg = arg.strip()
        if name in ("/exit", "/quit"):
            return "exit"
        if name == "/help":
            self.console.print(HELP, markup=False)
        elif name == "/route":
            if not arg:
                self.console.print(f"route: {self.route or 'auto'}")
            elif arg == "auto":
                self.route = None
                self.console.print("route: auto (the router decides)")
            elif arg in ROUTES:
                self.route = arg
                self.console.print(f"route: {arg}")
            else:
                self.console.print(f"[red]unknown route {arg!r}[/]; choose one of: auto, {', '.join(ROUTES)}")
        elif name == "/budget":
            if not arg:
                self.console.print(f"budget: {self.budget} tokens per turn")
            elif arg.isdigit() and int(arg) > 0:
                self.budget = int(arg)
                self.console.print(f"budget: {self.budget} tokens per turn")
            else:
                self.console.print("[red]/budget takes a positive number of tokens[/]")
        elif name == "/plan":
            plan = self.last.plan if self.last else None
            self.console.print(printable(json.dumps(plan, indent=2, ensure_ascii=False)) if plan else "no plan in the last turn",
                               markup=False)
        elif name == "/memory":
            if not self.session.turns:
                self.console.print("the conversation is empty")
            for i, t in enumerate(self.session.turns, 1):
                self.console.print(printable(f"{i}. you: {t.question}\n   agent: {t.answer}"), markup=False)
        elif name == "/trace":
            self._trace()
        elif name in ("/good", "/bad"):
            if not self.last or not self.last.run_id:
                self.console.print("no turn yet")
            else:
                self.agent.feedback(self.last.run_id, correct=name == "/good", note=arg, source="repl")
                self.console.print(f"recorded: run {self.last.run_id} {'right' if name == '/good' else 'wrong'}",
                                   markup=False)
        elif name == "/save":
            path = Path(arg) if arg else self.agent.settings.home / "chats" / f"chat-{len(self.session.turns)}.jsonl"
            self.console.print(f"saved {len(self.session.turns)} turns to {self.session.save(path)}", markup=False)
        elif name == "/reset":
            self.session.reset()
            self.console.print("conversation reset")
        else:
            self.console.print(f"[red]unknown command {name}[/]; /help lists them")
        return None

    def _trace(self) -> None:
        if not self.last or not self.last.run_id:
            self.console.print("no turn yet")
            return
        self.console.print(f"trajectory {self.last.run_id}  route {self.last.route}", markup=False)
        table = Table()
        for col in ("step", "state", "tokens"):
            table.add_column(col)
        for name, state, tokens in self.last.steps:
            table.add_row(name, state, str(tokens))
        self.console.print(table)
        self.console.print(f"trajectories: {self.agent.writer.path}", markup=False)

    def _ask_user(self, question: str) -> str:
        return self.console.input(f"[bold]agent asks:[/] {escape(printable(question))}\n> ")

    def _approve_plan(self, plan: Any) -> bool:
        shown = plan.model_dump() if hasattr(plan, "model_dump") else plan  # the plan route passes a Plan
        self.console.print(printable(json.dumps(shown, indent=2, ensure_ascii=False, default=str)), markup=False)
        return self.console.input("approve this plan? [Y/n] ").strip().lower() in ("", "y", "yes")

    def _history(self) -> None:
        """Arrow-key history across sessions, where readline exists."""
        try:
            import atexit
            import readline
        except ImportError:  # pragma: no cover - e.g. Windows
            return
        self.history_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            readline.read_history_file(self.history_file)
        except OSError:
            pass
        readline.set_history_length(1000)
        atexit.register(readline.write_history_file, self.history_file)


__all__ = ["Repl", "TurnView"]
