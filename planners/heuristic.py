"""Rule-based decomposition: comparisons, bridges, lists. The fallback when a model's plan is unusable.

* comparison  "Which magazine was started first, Arthur's Magazine or First for Women?" -> one step per
  option, ``answer_choices`` = the options; "Are A and B both X?" -> one step each, choices yes/no.
* bridge      "Who directed the film that starred X?" -> s1 finds "the film that starred X", s2 asks
  the question with ``{s1}`` in its place (runs after s1, with its finding substituted).
* list        "Where were A, B and C born?" -> one step per item.
* otherwise   one step: the question itself.
"""

from __future__ import annotations

import re
from typing import Any

from agentrt.core.text import YES_NO
from planners.plan import Plan, Step, validate_plan

_COMPARE = re.compile(r"^(?P<head>[^,]+?),\s*(?:the\s+)?(?P<a>[^,?]+?),?\s+or\s+(?:the\s+)?(?P<b>[^,?]+?)\s*\??$", re.I)
_BOTH = re.compile(
    r"^(?:are|were|is|was|do|did|does|have|has)\s+(?P<a>.+?)\s+and\s+(?P<b>.+?)\s+"
    r"(?P<rest>(?:both|the same|of the same|from the same|each|either)\b.*?)\s*\??$", re.I)
_BRIDGE = re.compile(
    r"(?P<np>\b(?:the|a|an)\s+(?:(?!(?:of|the|a|an)\b)[\w'-]+\s+){0,2}?[\w'-]+\s+(?:that|which|who|whose|where)\s+[^?]+?)\s*\??$", re.I)
_NAME = r"[A-Z][\w'.-]*(?:\s+[A-Z][\w'.-]*)*"
_LIST = re.compile(rf"(?P<items>(?:{_NAME},\s+)+{_NAME},?\s+and\s+{_NAME})")


class HeuristicPlanner:
    """Decomposes a question by rules; never calls a model."""

    name = "heuristic"

    def __init__(self, *, max_fanout: int = 8, max_depth: int = 2) -> None:
        self.max_fanout = max_fanout
        self.max_depth = max_depth

    async def plan(self, question: str, hits: list[Any] | None = None) -> Plan:
        """The plan for ``question`` (memory ``hits`` are not needed by the rules)."""
        return self.plan_sync(question)

    def plan_sync(self, question: str) -> Plan:
        q = " ".join(question.split())
        steps, choices = self._decompose(q)
        if len(steps) > self.max_fanout:
            # Cutting the decomposition would drop options or items without a word: search the whole
            # question as one step instead (the answer choices still hold).
            steps = [Step(id="s1", question=q)]
        plan = Plan(goal=q, steps=steps, answer_choices=choices, planner=self.name)
        return validate_plan(plan, max_fanout=self.max_fanout, max_depth=self.max_depth)

    def _decompose(self, q: str) -> tuple[list[Step], list[str]]:
        m = _BOTH.match(q)
        if m:
            a, b, rest = m["a"].strip(), m["b"].strip(), m["rest"].strip()
            rest = re.sub(r"^(both|each|either)\s+", "", rest, flags=re.I)
            return [Step(id="s1", question=f"{a}: {rest}?"), Step(id="s2", question=f"{b}: {rest}?")], ["yes", "no"]
        m = _COMPARE.match(q)
        if m:
            head, a, b = m["head"].strip(), m["a"].strip(), m["b"].strip()
            return [Step(id="s1", question=f"{a}: {head}?"), Step(id="s2", question=f"{b}: {head}?")], [a, b]
        m = _LIST.search(q)
        if m:
            items = [i.strip() for i in re.split(r",\s*(?:and\s+)?|\s+and\s+", m["items"])]
            items = [i for i in items if i]
            if len(items) >= 3:
                template = q.replace(m["items"], "{item}")
                return [Step(id=f"s{i + 1}", question=template.replace("{item}", it), budget_share=1.0)
                        for i, it in enumerate(items)], []
        m = _BRIDGE.search(q)
        if m and self.max_depth >= 2 and m.start("np") > 0:
            np_ = m["np"].strip()
            outer = q[: m.start("np")] + "{s1}" + q[m.end("np"):]
            return [Step(id="s1", question=f"What is {np_}?"),
                    Step(id="s2", question=outer.rstrip("?") + "?", depends_on=["s1"])], []
        return [Step(id="s1", question=q)], (["yes", "no"] if YES_NO.match(q) else [])
