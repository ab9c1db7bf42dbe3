"""Text verifiers: numeric match (GSM8K ``#### 42``), exact match / F1 (SQuAD normalization), hedges."""

from __future__ import annotations

import collections
import re
import string

from agentrt.core.answer import answer_span as answer_region  # the one extractor (the reason route votes on it)
from agentrt.trajectory.rewards._base import HEDGE_PENALTY, Reward, penalized

_NUMBER = re.compile(r"(?<![\w.])-?\$?\s?\d[\d,]*(?:\.\d+)?(?:\s?%)?")
_HEDGE_WORDS = re.compile(r"\b(or|either|maybe|perhaps|possibly)\b|±|\+/-", re.I)


def parse_number(text: str) -> float | None:
    """``"$1,234.50"`` -> 1234.5; None when ``text`` holds no number."""
    m = _NUMBER.search(text)
    if not m:
        return None
    raw = m.group(0).replace("$", "").replace(",", "").replace("%", "").replace(" ", "")
    try:
        return float(raw)
    except ValueError:
        return None


def gold_number(gold: str) -> float | None:
    """The gold value of a GSM8K answer (the part after the last ``####``) or of a bare number."""
    return parse_number(gold.rsplit("####", 1)[-1])


def hedged_numbers(region: str) -> list[float]:
    """The distinct numbers of a region that hedges between them ("42 or 43"), else []."""
    values = []
    for m in _NUMBER.finditer(region):
        v = parse_number(m.group(0))
        if v is not None and v not in values:
            values.append(v)
    if len(values) >= 2 and (_HEDGE_WORDS.search(region) or " ; " in region):
        return values
    return []


def numeric_match(response: str, gold: str) -> Reward:
    """1.0 when the response's final number equals the gold one (GSM8K style), else 0.0.

    A response that offers several different numbers as its answer is a hedge: penalized.
    """
    target = gold_number(gold)
    if target is None:
        return Reward(score=0.0, reason=f"the gold answer {gold[-40:]!r} holds no number", verifier="numeric")
    region, marked = answer_region(response)
    hedge = hedged_numbers(region)
    if hedge:
        return penalized(0.0, {"match": 0.0}, {"hedge": HEDGE_PENALTY},
                         f"hedges between {', '.join(f'{v:g}' for v in hedge)}", "numeric")
    if marked:
        value = parse_number(region)
    else:
        numbers = [parse_number(m.group(0)) for m in _NUMBER.finditer(response)]
        value = next((v for v in reversed(numbers) if v is not None), None)
    if value is None:
        return Reward(score=0.0, components={"match": 0.0, "marked": float(marked)}, reason="no number in the answer",
                      verifier="numeric")
    ok = abs(value - target) <= 1e-6 * max(1.0, abs(target))
    return Reward(score=float(ok), components={"match": float(ok), "marked": float(marked)},
                  reason=f"answer {value:g} {'==' if ok else '!='} gold {target:g}", verifier="numeric")


# -- SQuAD-style exact match and F1 ----------------------------------------------------------------

def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation and articles, collapse whitespace (the SQuAD v1.1 rule)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    common = collections.Counter(pred) & collections.Counter(ref)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def qa_match(response: str, golds: list[str]) -> Reward:
    """Partial credit: the best F1 over the gold answers (EM reported as a component).

    A short answer that hedges ("Paris or Lyon") when no gold answer has an "or" is penalized.
    """
    region, _ = answer_region(response)
    region = region or response
    em = max((exact_match(region, g) for g in golds), default=0.0)
    f1 = max((f1_score(region, g) for g in golds), default=0.0)
    if em < 1.0 and re.search(r"\b(or|either)\b", region, re.I) and not any(re.search(r"\bor\b", g, re.I) for g in golds):
        return penalized(f1, {"em": em, "f1": round(f1, 6)}, {"hedge": HEDGE_PENALTY},
                         "hedges between several answers", "qa")
    return Reward(score=round(f1, 6), components={"em": em, "f1": round(f1, 6)},
                  reason="exact match" if em else f"token F1 {f1:.2f}", verifier="qa")
