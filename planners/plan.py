"""The Plan schema and its validation.

A plan is a small DAG of sub-questions. Each step names the steps it depends on; a dependent step's
sub-question may contain ``{s1}``-style placeholders that the workflow fills with the findings of
those steps (bridge questions). ``validate_plan`` enforces the caps that bound a run: at most
``max_fanout`` steps, no cycles, and a dependency chain at most ``max_depth`` levels deep.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from agentrt.core.errors import InputError

PLACEHOLDER = re.compile(r"\{(s\d+)\}")


class PlanError(InputError):
    """A plan breaks a rule (cycle, unknown dependency, too many steps, too deep)."""


class Step(BaseModel):
    """One sub-question for one searcher."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^s\d+$", description="s1, s2, ...")
    question: str = Field(min_length=1, max_length=400)
    tools: list[str] = Field(default_factory=lambda: ["search"], description="tool hints for the searcher")
    depends_on: list[str] = Field(default_factory=list)
    budget_share: float = Field(default=1.0, gt=0.0, le=1.0, description="relative weight of the step's budget")


class Plan(BaseModel):
    """A goal and its steps (a DAG); ``answer_choices`` when the answer is one of a few.

    How long a searcher may run is the route's setting (``PlanSettings.max_steps``), not the plan's.
    """

    model_config = ConfigDict(extra="forbid")

    goal: str = Field(min_length=1)
    steps: list[Step] = Field(min_length=1)
    answer_choices: list[str] = Field(default_factory=list)
    planner: str = ""

    def step(self, step_id: str) -> Step:
        for s in self.steps:
            if s.id == step_id:
                return s
        raise PlanError(f"plan has no step {step_id!r}")

    def levels(self) -> list[list[Step]]:
        """Steps grouped in dependency order: level 0 depends on nothing, level i on levels < i."""
        depth = _depths(self)
        out: list[list[Step]] = [[] for _ in range(max(depth.values()) + 1)]
        for s in self.steps:
            out[depth[s.id]].append(s)
        return out

    def budget_split(self, total: int) -> dict[str, int]:
        """Tokens per step, proportional to ``budget_share``; the sum never exceeds ``total``."""
        weight = sum(s.budget_share for s in self.steps)
        return {s.id: int(total * s.budget_share / weight) for s in self.steps} if total > 0 else {
            s.id: 0 for s in self.steps}


def _depths(plan: Plan) -> dict[str, int]:
    ids = [s.id for s in plan.steps]
    if len(set(ids)) != len(ids):
        raise PlanError("plan step ids repeat; give every step a distinct id (s1, s2, ...)")
    deps = {s.id: list(s.depends_on) for s in plan.steps}
    for sid, ds in deps.items():
        for d in ds:
            if d not in deps:
                raise PlanError(f"step {sid} depends on unknown step {d!r}")
            if d == sid:
                raise PlanError(f"step {sid} depends on itself")
    depth: dict[str, int] = {}
    visiting: set[str] = set()

    def visit(sid: str) -> int:
        if sid in depth:
            return depth[sid]
        if sid in visiting:
            raise PlanError(f"plan has a dependency cycle through step {sid}; dependencies must form a DAG")
        visiting.add(sid)
        depth[sid] = 1 + max((visit(d) for d in deps[sid]), default=-1)
        visiting.discard(sid)
        return depth[sid]

    for sid in ids:
        visit(sid)
    return depth


def validate_plan(plan: Plan, *, max_fanout: int = 8, max_depth: int = 2) -> Plan:
    """Check the caps and the DAG; return the plan or raise ``PlanError`` saying what to fix.

    ``max_depth`` counts levels: 1 means all steps run in parallel, 2 allows one dependent level.
    """
    if len(plan.steps) > max_fanout:
        raise PlanError(f"plan has {len(plan.steps)} steps, more than max_fanout={max_fanout}; merge steps")
    depth = _depths(plan)
    if max(depth.values()) + 1 > max_depth:
        raise PlanError(f"plan is {max(depth.values()) + 1} levels deep, more than max_depth={max_depth}")
    for s in plan.steps:
        for ref in PLACEHOLDER.findall(s.question):
            if ref not in s.depends_on:
                raise PlanError(f"step {s.id} uses {{{ref}}} but does not depend on {ref}; add it to depends_on")
    return plan


def check_quality(plan: Plan, question: str) -> list[str]:
    """Why a (model-made) plan is not worth running: duplicated or empty steps. Empty list: usable."""
    problems = []
    seen: set[str] = set()
    for s in plan.steps:
        key = re.sub(r"\W+", " ", s.question.lower()).strip()
        if len(key) < 3:
            problems.append(f"step {s.id} is empty")
        if key in seen:
            problems.append(f"step {s.id} repeats another step")
        seen.add(key)
    if len(plan.steps) > 1 and all(
            re.sub(r"\W+", " ", s.question.lower()).strip() == re.sub(r"\W+", " ", question.lower()).strip()
            for s in plan.steps):
        problems.append("every step just repeats the question")
    return problems
