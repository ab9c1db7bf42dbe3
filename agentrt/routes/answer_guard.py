"""The synthesis rule where a route finalizes its answer (plan's synthesis, the read route).

``agentrt.core.injection`` finds the instruction-like sentences in the passages a route showed; here an
answer that obeys one (its span is a claim found only in an instruction) is dropped for the next
candidate that does not (a plan searcher's finding), else "I don't know.", and the swap is recorded
as a ``final_answer`` step: ``composed_from: "answer_rejected: injected instruction"``, with the
instruction, its passage and the answer the model gave. Off inside ``render_untrusted_legacy()``
(the injection bench's undefended baseline).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agentrt.core.injection import violation
from agentrt.core.text import legacy_rendering
from agentrt.routes.context import RunContext
from agentrt.trajectory import FinalAnswerStep

NO_ANSWER = "I don't know."
REJECTED = "answer_rejected: injected instruction"


def obeys_instruction(answer: str, passages: Sequence[tuple[str, str]]) -> bool:
    """Whether ``answer`` obeys an instruction in ``passages`` (never inside ``render_untrusted_legacy()``)."""
    return not legacy_rendering() and bool(answer) and violation(answer, passages) is not None


def guard_answer(ctx: RunContext, answer: str, passages: Sequence[tuple[str, str]],
                 candidates: Iterable[str] = ()) -> str:
    """``answer``, or its replacement when it obeys an instruction in ``passages`` (``(id, text)``
    pairs shown to the model): the first of ``candidates`` that obeys none, else ``NO_ANSWER``."""
    if legacy_rendering() or not answer:
        return answer
    inst = violation(answer, passages)
    if inst is None:
        return answer
    chosen = next((c.strip() for c in candidates if c and c.strip() and c.strip() != answer
                   and violation(c, passages) is None), NO_ANSWER)
    ctx.record(FinalAnswerStep(model_answer=answer, answer=chosen, composed_from=REJECTED,
                               instruction=inst.sentence, passage=inst.passage, detected=inst.why))
    return chosen


__all__ = ["NO_ANSWER", "REJECTED", "guard_answer", "obeys_instruction"]
