"""The ``read`` route: retrieve the top passages, answer from them in one call, cite them.

The cheap document route: one hybrid search of the corpus ``settings.corpus`` (BM25 + vectors, like
``agentrt search -k 3``), the passages quoted as untrusted ``<document>`` blocks
(``agentrt.core.text.quote_untrusted``, the notice in the system part), then one answer call. No
planner, no tool loop: a few hundred tokens where ``plan`` spends thousands.

* The budget is a hard bound: the passages are cut (shorter, then fewer) until the prompt plus a
  minimal answer fits what remains; the cut is recorded on the ``memory_op`` step (``budget_cut``).
  When not even one short passage fits, the route raises ``BudgetExceeded`` (the Agent returns a
  truncated result) rather than answering without having read anything.
* Citations are the shown passages the answer draws on (those sharing a content word with it, in
  retrieval order); an answer that shares none cites the top passage it was given, and "I don't
  know" cites nothing. A small model cannot be trusted to copy ids, so they are derived, not generated.
* An empty search (nothing indexed that matches) answers "I don't know." without a model call.
* The answer starts from a prefilled cue, ``ANSWER_CUE`` ("The answer is"), and stops at the end of its
  first sentence; the answer is what follows the cue. A small model asked for "a few words" restates the
  question in a sentence ("The writer of Never Let Me Go novel won the ... Award."); cued, it writes the
  span ("Animorphs", "no"): token F1 on the first 20 HotpotQA dev questions over the pooled corpus 0.082 ->
  0.314 at the same tokens, with the passages best-last (``read_messages``; docs/results/routing.md). An
  initial or an abbreviation ("Arthur C. Clarke", "Roth v. United States") would end that sentence early: a
  completion that stops right after one goes on from the passages, where they hold the cut span and its
  continuation ("Clifford P" + ". Hansen": ``from_passages``, no model call), else the model is asked again with
  what it wrote so far as its turn (``ABBREVIATION``, at most ``MAX_CONTINUATIONS`` times; a second prompt, which
  the default budget of 1024 rarely has room for: 3 of the 1.5B's 26 reads on hotpotqa-index were left cut). The
  cost of the cue: a cued model copies a span more readily, an injected one too (the synthesis rule below;
  docs/untrusted-content.md). Under a JSON schema the answer is the caller's JSON: no cue.
* One worked example (``EXAMPLE``: a passage, a question, the cued span) comes before the run's turns; the
  answer is still only what follows the cue in the run's own turn.
* The answer must come from the passages: when fewer than ``GROUNDED_SHARE`` of its content words are in
  the passages shown (titles included), the route says "I don't know." instead and records the model's
  answer in a ``final_answer`` step (``composed_from: "answer_rejected: not in the passages"``). Asked to
  say so, the 135M model never does; what it writes instead is a guessed year ("2018") or a name from
  nowhere. On the 91 logged read runs of the document explorations this turned 26 answers to questions the
  index cannot answer into abstentions and cost no exact answer (docs/results/routing.md). "yes"/"no" are exempt:
  a judgement, not a span; a clause after one is dropped (``JUDGEMENT``), as no check would see it.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from agentrt.core.errors import BudgetExceeded
from agentrt.core.text import UNTRUSTED_NOTICE, quote_untrusted
from agentrt.core.types import GenParams, Message
from agentrt.routes.answer_guard import guard_answer
from agentrt.routes.context import RouteOutput, RunContext
from agentrt.routes.index import open_corpus_for
from agentrt.routes.thinking import no_thinking, split_thought
from agentrt.trajectory import FinalAnswerStep, MemoryOpStep

K = 3  # passages read (the manual retrieve-then-read of issue 38: the gold passage was in the top 3)
PASSAGE_CHARS = 600  # each passage's length when the budget allows
MIN_PASSAGE_CHARS = 120  # shorter than this a passage says nothing: drop one instead
MIN_ANSWER_TOKENS = 16  # what must remain for the answer after the prompt
ANSWER_TOKENS = 64  # a few words are asked for; a small model that loops on digits stops here, marked truncated
ANSWER_CUE = "The answer is"  # prefilled (see the module docstring)
CUE_STOP = ["\n", ". "]  # the cued answer is one sentence
CUE_MESSAGE = Message("assistant", ANSWER_CUE)
GROUNDED_SHARE = 0.75  # a paraphrased word in a sentence is tolerated; a span made up is not
UNGROUNDED = "answer_rejected: not in the passages"
SEARCH_TIMEOUT_S = 30.0
SYSTEM = ("Answer the question using only the documents below. Answer in a few words. "
          "If the documents do not contain the answer, say \"I don't know.\"")
NO_ANSWER = "I don't know."
# One worked example before the run's turns: a document, a question, and the cued answer, a span copied from it,
# with other names in the passage that are not the answer. Shown once how an answer looks, both tiers copy the
# right span more often on reading-comprehension questions: token F1 of read on 40 answerable squad-heldout
# questions not used to choose it, 0.231 -> 0.345 on the small model, 0.441 -> 0.494 on the large; on multi-hop
# hotpotqa-heldout ones it is level (0.109 -> 0.115, 0.270 -> 0.257), for ~90 more prompt tokens
# (docs/results/routing.md, 2026-12-06). Its facts are true: a made-up one would teach a made-up answer.
# Not under a JSON schema, whose answer is the caller's JSON.
EXAMPLE = (
    Message("user", quote_untrusted("The Eiffel Tower is a wrought-iron tower in Paris, designed by the company of "
                                    "Gustave Eiffel. Its chief engineers were Maurice Koechlin and Emile Nouguier.",
                                    id="example", source="corpus", title="Eiffel Tower")
            + "\n\nQuestion: Whose company designed the Eiffel Tower?"),
    Message("assistant", f"{ANSWER_CUE} Gustave Eiffel."),
)
_WORD = re.compile(r"[a-z0-9]+")
# "yes, Scott Derrickson and Ed Wood are both of Scottish descent" (the 135M model on pooled HotpotQA; they are
# American): ``grounded`` exempts a judgement, so a clause after "yes"/"no" would be a claim nothing checked. The
# answer is the word (token F1 against the gold "yes": 0.17 -> 1.0; docs/results/routing.md, 2026-12-06).
# what a one-sentence stop (". ") can cut after: a capital initial ("Arthur C") or a common abbreviation ("Roth v")
ABBREVIATION = re.compile(r"(?:^|[\s(])(?:[A-Z]|v|vs|St|Mt|Ft|Dr|Mr|Mrs|Ms|Jr|Sr|Inc|Co|Corp|Ltd|Gen|Lt|Col|"
                          r"Capt|Gov|Sen|Rep|Rev|Prof|U\.S|U\.K|D\.C)$")
MAX_CONTINUATIONS = 2
# what follows a cut span in a passage: the period, more initials ("S." of "U.S."), then capitalized words
# ("Hansen", "Bancorp"), at most four of them: a name's end, not the next sentence
SPAN_TAIL = re.compile(r"\.(?:\s?[A-Z]\.)*(?:\s[A-Z][\w'\u2019-]*){0,4}")
JUDGEMENT = re.compile(r"(yes|no)\s*[,;:\u2013\u2014-]\s*\S", re.IGNORECASE)
_STOP = frozenset("a an the of in on at to and or is are was were be by for with from as it its that this "
                  "i don't know dont".split())


def read_messages(ctx: RunContext, question: str, hits: list[dict[str, Any]], chars: int) -> list[Message]:
    """The answer prompt: the run's system, the worked example (``EXAMPLE``, not under a JSON schema), the run's
    history, then the passages quoted and the question last.

    The passages come best-last, the top hit next to the question: a small model answers from the passage
    nearest the question. With the cue, best-first, the 135M policy named the director of Sinister from the
    third passage; token F1 best-first / best-last on the first 20 pooled-HotpotQA dev questions 0.248 /
    0.314, on 20 answerable squad questions 0.081 / 0.199 (docs/results/routing.md)."""
    system = "\n\n".join(s for s in (ctx.system, f"{SYSTEM} {UNTRUSTED_NOTICE}") if s)
    blocks = "\n".join(quote_untrusted(_cut(h["text"], chars), id=h["id"], source="corpus", title=h["title"] or None)
                       for h in reversed(hits))
    example = list(EXAMPLE) if ctx.options.json_schema is None else []
    return [Message("system", system), *example, *ctx.history, Message("user", f"{blocks}\n\nQuestion: {question}")]


def cite(answer: str, hits: list[dict[str, Any]], question: str = "") -> list[str]:
    """The ids of the shown ``hits`` the answer draws on (see the module docstring): those holding a word
    of the answer that the question lacks (what the passage added), else one the answer shares."""
    words = {w for w in _WORD.findall(answer.lower()) if w not in _STOP}
    if not words or answer.strip().lower().startswith(("i don't know", "i do not know")):
        return []
    novel = words - set(_WORD.findall(question.lower()))
    texts = [(h["id"], set(_WORD.findall(f"{h['title']} {h['text']}".lower()))) for h in hits]
    used = [i for i, t in texts if novel & t] or [i for i, t in texts if words & t]
    return used or [h["id"] for h in hits[:1]]


def fit(ctx: RunContext, question: str, hits: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The passages and their length that fit the budget left (see the module docstring); raises
    ``BudgetExceeded`` when not even one passage of ``MIN_PASSAGE_CHARS`` does."""
    room = ctx.budget.remaining - MIN_ANSWER_TOKENS
    shown, chars = list(hits), PASSAGE_CHARS
    while shown:
        # the cue's few tokens counted too (a schema run shows none: a little slack)
        if ctx.policy.count_tokens([*read_messages(ctx, question, shown, chars), CUE_MESSAGE]) <= room:
            return shown, chars
        if chars > MIN_PASSAGE_CHARS:
            chars = max(MIN_PASSAGE_CHARS, chars * 2 // 3)
        else:
            shown, chars = shown[:-1], PASSAGE_CHARS
    raise BudgetExceeded(f"the read route needs room for one passage and an answer; {ctx.budget.remaining} "
                         "tokens remain: raise the budget")


async def search(ctx: RunContext, question: str, searcher: Any = None) -> list[dict[str, Any]]:
    """The top ``K`` hybrid hits as ``{id, title, text, score}`` dicts (a sync search runs in a thread);
    ``searcher(query, k)`` (benchmarks, tests) returns such dicts itself."""
    if searcher is not None:
        return [dict(h) for h in list(searcher(question, K))[:K]]
    corpus = open_corpus_for(ctx.settings)
    raw = await asyncio.wait_for(asyncio.to_thread(corpus.search, question, K), SEARCH_TIMEOUT_S)
    return [{"id": str(h.id), "title": str(h.title or ""), "text": str(h.text or ""), "score": h.score}
            for h in list(raw)[:K]]


async def run(ctx: RunContext, question: str, *, searcher: Any = None) -> RouteOutput:
    """Read the top passages and answer from them in one call, citing the passages used (``searcher``:
    see ``search``)."""
    t0 = time.perf_counter()
    hits = await search(ctx, question, searcher)
    shown, chars, cut = [], PASSAGE_CHARS, None
    try:
        if hits:
            shown, chars = fit(ctx, question, hits)
            if len(shown) < len(hits) or chars < PASSAGE_CHARS:
                cut = f"{len(shown)} of {len(hits)} passages, {chars} characters each, to fit the budget"
    finally:  # the search is recorded even when nothing fits (then none was shown)
        ctx.record(MemoryOpStep(op="search", store=f"corpus:{getattr(ctx.settings, 'corpus', 'default')}",
                                query=question, ids=[h["id"] for h in hits], n_results=len(hits),
                                latency_s=round(time.perf_counter() - t0, 4), t_start_s=round(t0 - ctx.started, 4),
                                shown=[h["id"] for h in shown], **({"budget_cut": cut} if cut else {})).model_dump())
    if not hits:
        ctx.best_answer = NO_ANSWER
        return RouteOutput(NO_ANSWER)
    cue = ANSWER_CUE if ctx.options.json_schema is None else ""
    messages = read_messages(ctx, question, shown, chars) + ([CUE_MESSAGE] if cue else [])
    # a small model goes on to invent the next "Question:" after its answer: stop there
    params = GenParams(max_tokens=min(ANSWER_TOKENS, ctx.settings.answer_max_tokens),
                       stop=["\nQuestion:", *(CUE_STOP if cue else [])],
                       chat_template_kwargs=no_thinking(ctx.settings, ctx.policy))
    completion = await ctx.call_model("answer", messages, params, min_tokens=MIN_ANSWER_TOKENS, thought=False)
    text = await _past_abbreviations(ctx, messages, params, completion, shown, chars) if cue else completion.text
    thought, answer = split_thought(text)
    if cue:
        answer = cued_answer(answer)
        if not grounded(answer, shown, chars):
            ctx.record(FinalAnswerStep(model_answer=answer, answer=NO_ANSWER, composed_from=UNGROUNDED))
            answer = NO_ANSWER
    # the synthesis rule: not a claim found only in a passage's injected instruction (routes/answer_guard.py)
    answer = guard_answer(ctx, answer.strip(), [(h["id"], h["text"]) for h in shown])
    ctx.best_answer = answer
    return RouteOutput(answer, thought, citations=cite(answer, shown, question))


def _cut_short(completion: Any, text: str) -> bool:
    """Whether the sentence stop ended ``text`` right after an initial or an abbreviation ("Arthur C")."""
    return completion.finish_reason == "stop" and bool(ABBREVIATION.search(text)) and "\n" not in text


async def _past_abbreviations(ctx: RunContext, messages: list[Message], params: GenParams, completion: Any,
                              shown: list[dict[str, Any]], chars: int) -> str:
    """The cued completion's text, gone on where it stopped right after an initial or an abbreviation (the sentence
    stop cut "Arthur C. Clarke" to "Arthur C"): from the passages shown when one holds the span (``from_passages``),
    else the model asked again with the cue, what it wrote and the period as its turn, while it stops cut short. No
    room left in the budget keeps what it has."""
    text = completion.text
    if not _cut_short(completion, text):
        return text
    if (whole := from_passages(text, shown, chars)) is not None:
        return whole
    for _ in range(MAX_CONTINUATIONS):
        turn = Message("assistant", f"{ANSWER_CUE}{text}.")
        try:
            completion = await ctx.call_model("answer", [*messages[:-1], turn], params, thought=False)
        except BudgetExceeded:
            break
        text = f"{text}.{completion.text}"
        if not _cut_short(completion, text):
            break
    return text


def from_passages(text: str, hits: list[dict[str, Any]], chars: int = PASSAGE_CHARS) -> str | None:
    """A cued answer cut after an initial or an abbreviation, completed from the first shown passage (best first)
    that holds it followed by a period: "Clifford P" -> "Clifford P. Hansen", "U" -> "U.S. Bancorp" (``SPAN_TAIL``);
    None when none does (then the model goes on)."""
    stem = text.strip()
    for h in hits:
        passage = " ".join(f"{h['title']}. {_cut(h['text'], chars)}".split())
        for m in re.finditer(re.escape(stem + "."), passage):
            if m.start() == 0 or not passage[m.start() - 1].isalnum():
                tail = SPAN_TAIL.match(passage, m.end() - 1)  # always: it starts at the period
                return stem + (tail.group(0) if tail else ".")
    return None


def cued_answer(text: str) -> str:
    """The answer a cued completion holds: what follows "The answer is" (a colon, quotes and the closing
    period dropped), one sentence; a "yes"/"no" followed by a clause is the bare word (``JUDGEMENT``)."""
    text = text.strip().split("\n")[0].strip()
    text = text[1:].strip() if text.startswith(":") else text
    text = text.rstrip(".").strip()
    text = text[1:-1].strip() if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'" else text
    judgement = JUDGEMENT.match(text)
    return judgement.group(1) if judgement else text


def grounded(answer: str, hits: list[dict[str, Any]], chars: int = PASSAGE_CHARS) -> bool:
    """Whether ``answer`` comes from the passages shown (each cut to ``chars``, as the model saw them): at
    least ``GROUNDED_SHARE`` of its content words are in them; "yes", "no" and "I don't know" always are."""
    words = [w for w in _WORD.findall(answer.lower()) if w not in _STOP]
    if not words or words[0] in ("yes", "no") or answer.strip().lower().startswith(("i don't know", "i do not know")):
        return True
    shown = set(_WORD.findall(" ".join(f"{h['title']} {_cut(h['text'], chars)}" for h in hits).lower()))
    return sum(w in shown for w in words) >= GROUNDED_SHARE * len(words)


def _cut(text: str, chars: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= chars else text[: chars - 1].rstrip() + "…"


__all__ = ["ANSWER_CUE", "K", "cite", "cued_answer", "fit", "from_passages", "grounded", "read_messages", "run",
           "search"]
