"""Suite loading (the shipped files) and custom-suite validation: one line, the line number and field, exit 2."""

from __future__ import annotations

import json

import pytest

from agentrt.app.cli import main
from agentrt.core.errors import InputError
from evals.suites import DATA_DIR, SHIPPED, load_jsonl, load_suite


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_suites_load(name):
    suite = load_suite(name)
    assert len(suite.items) == 300
    assert suite.source.startswith(str(DATA_DIR))
    assert len({i.id for i in suite.items}) == 300
    assert (DATA_DIR / "LICENSES.md").read_text().count(f"{name}.jsonl") == 1


def test_every_docs_answer_is_in_the_frozen_docs_corpus():
    """A gold answer the corpus does not hold would score a right abstention as wrong and teach the router that
    reading the docs fails. The corpus is frozen (python -m evals.devsets re-cuts it only when it is missing)."""
    suite = load_suite("docs")
    texts = [json.loads(line)["text"].lower() for line in (DATA_DIR / "docs-corpus.jsonl").open(encoding="utf-8")]
    answerable = [i for i in suite.items if i.type != "unanswerable"]
    assert len(answerable) == 96 and len(suite.items) == 144
    missing = [i.question for i in answerable if not any(a.lower() in t for a in i.answers for t in texts)]
    assert missing == []


def test_shipped_data_is_small():
    # 3.1 MB with the two held-out families adapt_bench learns on (squad-heldout, hotpotqa-heldout: 1.1 MB)
    assert sum(p.stat().st_size for p in DATA_DIR.iterdir()) < 3_500_000


def test_custom_suite_with_corpus(tmp_path):
    (tmp_path / "passages.jsonl").write_text('{"id": "p1", "text": "Paris is the capital of France."}\n')
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in [
        {"id": 1, "question": "Capital of France?", "answers": ["Paris", "paris, france"], "type": "qa", "corpus": "passages.jsonl"},
        {"id": "c", "question": "def f():\n", "type": "code", "tests": "def check(c):\n    assert c() == 1\n", "entry_point": "f"},
        {"id": "i", "question": "say hi in lowercase", "type": "instruction", "instruction_id_list": ["change_case:english_lowercase"]},
        {"id": "u", "question": "What am I thinking?", "type": "unanswerable"},
    ]) + "\n")
    suite = load_jsonl(path)
    assert [i.verifier for i in suite.items] == ["qa", "unit_tests", "ifeval", "abstain"]
    assert suite.items[0].corpus == str(tmp_path / "passages.jsonl")
    assert suite.items[2].kwargs == [{}]


BAD = [
    ({"question": "q", "answer": "1", "type": "math"}, "missing field 'id'"),
    ({"id": 1, "answer": "1", "type": "math"}, "missing field 'question'"),
    ({"id": 1, "question": 5, "answer": "1", "type": "math"}, "field 'question' must be a non-empty string"),
    ({"id": 1, "question": "q", "answer": "1", "type": "poetry"}, "field 'type' must be one of"),
    ({"id": 1, "question": "q", "type": "math"}, "missing field 'answer'"),
    ({"id": 1, "question": "q", "answers": "x", "type": "qa"}, "field 'answers' must be a non-empty list"),
    ({"id": 1, "question": "q", "type": "code", "entry_point": "f"}, "missing field 'tests'"),
    ({"id": 1, "question": "q", "type": "instruction", "instruction_id_list": ["a"], "kwargs": {}}, "field 'kwargs'"),
    ({"id": 1, "question": "q", "answer": "1", "type": "qa", "corpus": "nope.jsonl"}, "field 'corpus' names"),
    ({"id": 1, "question": "q", "answer": "1", "type": "qa", "verifier": "vibes"}, "field 'verifier'"),
]


@pytest.mark.parametrize("bad,message", BAD)
def test_validation_error_names_line_and_field(tmp_path, capsys, bad, message):
    path = tmp_path / "s.jsonl"
    good = {"id": "ok", "question": "2+2?", "answer": "4", "type": "math"}
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    code = main(["eval", "--suite", str(path), "--router", "fixed:direct", "--policy", "scripted:4", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1, err
    assert f"{path}:2:" in err and message in err
    assert not (tmp_path / "o").exists()  # rejected before anything ran


def test_bad_json_duplicate_ids_unknown_suite_and_router(tmp_path, capsys):
    path = tmp_path / "s.jsonl"
    path.write_text('{"id": 1, "question": "q", "answer": "1", "type": "qa"}\n{"id": 1,\n')
    with pytest.raises(InputError, match=r"s.jsonl:2: not valid JSON"):
        load_jsonl(path)
    path.write_text('{"id": 1, "question": "q", "answer": "1", "type": "qa"}\n' * 2)
    with pytest.raises(InputError, match=r"s.jsonl:2: field 'id' '1' repeats"):
        load_jsonl(path)
    assert main(["eval", "--suite", "nosuch", "--out", str(tmp_path / "o")]) == 2
    assert "unknown suite 'nosuch'" in capsys.readouterr().err
    assert main(["eval", "--suite", "gsm8k", "--router", "fixed:think", "--out", str(tmp_path / "o")]) == 2
    assert "unknown route in router 'fixed:think'" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--samples", "--workers", "--budget", "--limit"])
def test_non_positive_numbers_are_rejected(tmp_path, capsys, flag):
    code = main(["eval", "--suite", "gsm8k", flag, "0", "--policy", "scripted:4", "--out", str(tmp_path / "o")])
    assert code == 2
    assert f"{flag} must be a positive integer" in capsys.readouterr().err


def test_the_pooled_hotpotqa_dev_set_shares_no_question_with_the_eval_or_the_held_out_families():
    """hotpotqa-pooled is learned on over the pooled index; the eval's ``hotpotqa`` suite (the first 500 dev
    questions, asked over that same index) and the families no shipped router may see must not hold its questions."""
    pooled = load_suite("hotpotqa-pooled")
    assert len(pooled.items) == 48 and {i.type for i in pooled.items} == {"qa"}
    assert all(i.corpus is None for i in pooled.items)  # the run's corpus is searched: --corpus hotpotqa
    others = {i.question.strip() for name in ("hotpotqa", "hotpotqa-index", "hotpotqa-heldout")
              for i in load_suite(name).items}
    assert not {i.question.strip() for i in pooled.items} & others
