"""The plan route's prompt text: planner, searcher, synthesis and verify messages.

Retrieved passages and the searchers' findings (model text written from passages) are untrusted: each
reaches a prompt only inside a ``<document>`` block made by ``agentrt.core.text.quote_untrusted``, and
the rule about those blocks (``UNTRUSTED_NOTICE``) sits in the system message, never inside the data.
The user turn ends with the question again, after the data, so the last words the model reads before
answering are ours, not a passage's.

``render_untrusted_legacy()`` (agentrt.core.text) switches these builders back to the pre-quoting
prompts, word for word: the injection benchmark's "before" column, nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrt.core.text import UNTRUSTED_NOTICE, legacy_rendering, quote_untrusted
from agentrt.core.types import Message

PLANNER_SYSTEM = (
    "You split a question into independent search sub-questions, one per fact to look up. "
    "Reply with JSON. Use depends_on only when a sub-question needs another's answer."
)
SYNTH_SYSTEM = ("Answer the question using only the findings. Reply with JSON: a short answer and the ids "
                "of the passages that support it.")
SEARCH_PROMPT = "Find out: {q}\nSearch the knowledge base first, then give a short final answer."
VERIFY_ASK = "Do the passages support the answer? Reply yes or no."
BACKGROUND_CHARS = 160  # of each of the first three hits the planner sees
SYNTH_PASSAGE_CHARS = 240


def _get(hit: Any, key: str) -> Any:
    return hit.get(key, "") if isinstance(hit, dict) else getattr(hit, key, "")


def planner_messages(question: str, hits: Sequence[Any] | None = None) -> list[Message]:
    """The planner's prompt: the question, with the first three memory hits as background."""
    if legacy_rendering():
        context = ""
        if hits:
            lines = [f"- {_get(h, 'title')}: {str(_get(h, 'text'))[:BACKGROUND_CHARS]}" for h in hits[:3]]
            context = "Background:\n" + "\n".join(lines) + "\n\n"
        return [Message("system", PLANNER_SYSTEM), Message("user", f"{context}Question: {question}")]
    if not hits:
        return [Message("system", PLANNER_SYSTEM), Message("user", f"Question: {question}")]
    blocks = [quote_untrusted(str(_get(h, "text"))[:BACKGROUND_CHARS], title=str(_get(h, "title")) or None)
              for h in hits[:3]]
    return [Message("system", f"{PLANNER_SYSTEM} {UNTRUSTED_NOTICE}"),
            Message("user", "Background:\n" + "\n".join(blocks) + f"\n\nQuestion: {question}")]


def search_messages(sub_question: str) -> list[Message]:
    """A searcher's task. The tool loop's system prompt frames the tool results it gets back."""
    return [Message("user", SEARCH_PROMPT.format(q=sub_question))]


def synth_messages(goal: str, findings: Sequence[dict[str, Any]],
                   missing: Sequence[str]) -> tuple[list[Message], dict[str, dict[str, Any]]]:
    """The synthesis prompt over the searchers' ``findings`` (step, question, answer, passages) and
    what is ``missing``; also the passages it shows, by id (each once), for the citation schema."""
    passages: dict[str, dict[str, Any]] = {}
    legacy = legacy_rendering()
    lines = []
    for f in findings:
        if legacy:
            lines.append(f"[{f['step']}] {f['question']} -> {f['answer'] or '(no answer)'}")
        else:  # a searcher's answer was written from passages: as untrusted as they are
            lines.append(quote_untrusted(f["answer"] or "(no answer)", id=f["step"], source="searcher",
                                         question=f["question"]))
        for p in f["passages"]:
            if p["id"] not in passages:
                passages[p["id"]] = p
                text = p["text"][:SYNTH_PASSAGE_CHARS]
                lines.append(f"  passage [{p['id']}] {p['title']}: {text}" if legacy else
                             quote_untrusted(text, id=p["id"], source="corpus", title=p["title"] or None))
    lines += [f"[missing] {m}" for m in missing]
    if legacy:
        return [Message("system", SYNTH_SYSTEM),
                Message("user", f"Question: {goal}\nFindings:\n" + "\n".join(lines))], passages
    return [Message("system", f"{SYNTH_SYSTEM}\n{UNTRUSTED_NOTICE}"),
            Message("user", f"Question: {goal}\nFindings:\n" + "\n".join(lines)
                    + f"\n\nAnswer this question from the findings: {goal}")], passages


def verify_messages(question: str, answer: str, passages: Sequence[dict[str, Any]]) -> list[Message]:
    """Ask whether the cited ``passages`` support ``answer``."""
    tail = f"\n\nQuestion: {question}\nAnswer: {answer}\n{VERIFY_ASK}"
    if legacy_rendering():
        body = "\n".join(f"[{p['id']}] {p['text'][:SYNTH_PASSAGE_CHARS]}" for p in passages) or "(no passages)"
        return [Message("user", f"Passages:\n{body}{tail}")]
    body = "\n".join(quote_untrusted(p["text"][:SYNTH_PASSAGE_CHARS], id=p["id"], source="corpus")
                     for p in passages) or "(no passages)"
    return [Message("system", UNTRUSTED_NOTICE), Message("user", f"Passages:\n{body}{tail}")]


__all__ = ["PLANNER_SYSTEM", "SEARCH_PROMPT", "SYNTH_SYSTEM", "planner_messages", "search_messages",
           "synth_messages", "verify_messages"]
