"""RLCR end to end on the real embedded model (issue 21): ``agentrt train-policy --grpo --reward rlcr`` runs one
tiny step (2 prompts x 2 generations, a few tokens), the saved folder loads through the hf backend as
``hf:PATH`` and answers with a confidence in [0, 1]. Plus the overoptimization watch's rules on plain numbers.
"""

from __future__ import annotations

import json

import pytest

from agentrt.train.watch import calibration, ece, flags, should_stop


def test_watch_metrics_on_known_numbers():
    # Perfectly separated, honestly stated: AUROC 1; ECE = the gap inside each occupied bin.
    m = calibration([0.9, 0.9, 0.1, 0.1], [True, True, False, False])
    assert m["accuracy"] == 0.5 and m["auroc"] == 1.0
    assert m["ece"] == pytest.approx(0.1) and m["brier"] == pytest.approx(0.01) and m["confident_wrong"] == 0.0
    # One confidence for everything: AUROC 0.5, and every wrong answer at 0.9 is a confident wrong one.
    m = calibration([0.9] * 4, [True, False, False, False])
    assert m["auroc"] == 0.5 and m["confident_wrong"] == 0.75 and m["ece"] == pytest.approx(0.65)
    assert ece([], []) is None


def test_watch_flags_collapse_and_stops_only_when_held_out_falls_while_train_rises():
    first = {"stated": 10, "confidence_std": 0.2, "mean_length": 10, "same_answer": 0.1, "empty": 0, "malformed": 0}
    assert flags(first, None) == []
    assert flags({**first, "confidence_std": 0.0}, first) == ["constant_confidence"]
    assert flags({**first, "same_answer": 0.9}, first) == ["format_gaming"]
    assert flags({**first, "tag_in_answer": 0.4}, first) == ["format_gaming"]  # "<0.05</confidence)." as the answer
    assert flags({**first, "mean_length": 25}, first) == ["length_blowup"]
    # Accuracy down from 0.35 to 0.2 ("The answer is 0.0000" after confidence training): the answers moved.
    assert flags({**first, "accuracy": 0.2}, {**first, "accuracy": 0.35}) == ["answer_drift"]
    assert flags({**first, "accuracy": 0.3}, {**first, "accuracy": 0.35}) == []  # within the 0.1 allowance

    def entries(values, trains):
        return [{"step": 5 * i, "value": v, "train_reward": t} for i, (v, t) in enumerate(zip(values, trains))]

    assert should_stop(entries([0.1, 0.3, 0.2, 0.1], [None, 0.0, 0.2, 0.4])).startswith("held-out value fell")
    assert should_stop(entries([0.1, 0.3, 0.2, 0.1], [None, 0.4, 0.2, 0.1])) is None  # both fall: no overfitting
    assert should_stop(entries([0.1, 0.3, 0.29, 0.1], [None, 0.0, 0.2, 0.4])) is None  # within tol once: patience
    assert should_stop(entries([0.1, 0.2, 0.3], [None, 0.1, 0.2])) is None


def test_watch_keeps_the_weights_of_its_best_evaluation(tmp_path):
    import torch
    from types import SimpleNamespace

    from agentrt.train.watch import make_watch

    def run(keep_best: bool):
        values = iter([0.1, 0.5, 0.2])  # held-out value at steps 0, 5, 10: best at step 5

        class Scripted:  # stands in for HeldOut: the mechanics under test are the snapshot and the restore
            def score(self, model):
                return {"value": next(values), "mean_length": 5.0}

        model = torch.nn.Linear(2, 1)
        model.bias.requires_grad_(False)  # frozen weights are neither saved nor put back
        watch = make_watch(Scripted(), tmp_path / f"w{keep_best}" / "watch", every=5, keep_best=keep_best)
        state, control = SimpleNamespace(global_step=0, log_history=[]), SimpleNamespace(should_training_stop=False)
        watch.on_train_begin(None, state, control, model=model)
        for step, weight in ((5, 1.0), (10, 2.0)):
            with torch.no_grad():
                model.weight.fill_(weight)
                model.bias.fill_(weight)
            state.global_step = step
            watch.on_step_end(None, state, control, model=model)
        watch.on_train_end(None, state, control, model=model)
        return model, json.loads((tmp_path / f"w{keep_best}" / "watch.json").read_text())

    model, log = run(True)
    assert log["best_step"] == 5 and log["restored"].startswith("step 5 (held-out value 0.500) instead of step 10")
    assert model.weight.eq(1.0).all() and model.bias.eq(2.0).all()
    model, log = run(False)
    assert log["restored"] is None and model.weight.eq(2.0).all()
    # Resuming that folder with other trainable weights (the bias too): the snapshot does not fit; one clear error.
    from agentrt.core.errors import InputError

    watch = make_watch(None, tmp_path / "wTrue" / "watch", every=5)
    with pytest.raises(InputError, match="delete it and train again, or pass --keep-last"):
        watch.on_train_end(None, SimpleNamespace(global_step=10, log_history=[]), None, model=torch.nn.Linear(2, 1))


def test_one_rlcr_step_saves_a_policy_that_states_its_confidence(tmp_path, capsys):
    from agentrt.app.cli import main
    from agentrt.backends import load_backend
    from agentrt.core.config import Settings
    from agentrt.core.confidence import CONFIDENCE_CHOICES, CONFIDENCE_INSTRUCTION, OPEN_TAG, split_confidence
    from agentrt.core.types import GenParams, Message

    data = tmp_path / "prompts.jsonl"  # what `agentrt export --format trl-prompts` writes, two suites' verifiers
    data.write_text(json.dumps({"prompt": [{"role": "user", "content": "What is 2 + 3?"}], "answer": "5",
                                "verifier": "numeric"}) + "\n" +
                    json.dumps({"prompt": [{"role": "user", "content": "What is the capital of France?"}],
                                "answer": ["Paris"], "verifier": "qa"}) + "\n")
    out = tmp_path / "policy"
    code = main(["train-policy", "--grpo", "--reward", "rlcr", "--data", str(data), "--out", str(out), "--steps", "1",
                 "--num-generations", "2", "--batch-size", "4", "--max-completion-length", "4", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["steps"] == 1 and report["changed_tensors"] == report["total_tensors"] > 100
    parts = report["components"][0]
    # Every completion carries a confidence (the runtime's grammar tail where the policy wrote none).
    assert parts["missing"] == 0.0 and 0.0 <= parts["confidence"] <= 1.0 and 0.0 <= parts["brier"] <= 1.0
    assert (out / "config.json").is_file()

    backend = load_backend(f"hf:{out}", Settings(), cache=False)
    try:
        question = [Message("user", f"What is the capital of France?\n\n{CONFIDENCE_INSTRUCTION}")]
        answer = backend.chat_sync(question, GenParams(max_tokens=24)).choices[0].text
        stated = split_confidence(answer)
        if stated.status != "ok":  # a one-step 135M policy rarely writes the tag itself: the grammar tail
            tail = backend.chat_sync(question + [Message("assistant", f"{stated.answer}\n{OPEN_TAG}")],
                                     GenParams(max_tokens=6, choices=list(CONFIDENCE_CHOICES))).choices[0].text
            stated = split_confidence(f"{stated.answer}\n{OPEN_TAG}{tail}")
        assert stated.status == "ok" and 0.0 <= stated.confidence <= 1.0, stated
    finally:
        backend.close()


def test_confidence_only_training_moves_only_the_top_layers_and_is_paid_by_calibration(tmp_path, capsys):
    from agentrt.app.cli import main

    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": q}], "answer": a, "verifier": "numeric"}) + "\n"
                            for q, a in (("What is 2 + 3?", "5"), ("What is 4 + 4?", "8"))))
    held = tmp_path / "held.jsonl"
    held.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": q}], "answer": a, "verifier": "numeric"})
                            + "\n" for q, a in (("What is 1 + 1?", "2"), ("What is 3 + 3?", "6"))))
    out = tmp_path / "policy"
    code = main(["train-policy", "--grpo", "--reward", "rlcr", "--train", "confidence", "--train-layers", "2",
                 "--data", str(data), "--out", str(out), "--steps", "1", "--num-generations", "2", "--batch-size", "4",
                 "--max-completion-length", "4", "--confidence-temperature", "3", "--watch", str(held),
                 "--watch-every", "1", "--keep-last", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # The watch scored the held-out rows before and after the step, and kept the last step as asked.
    log = json.loads((out / "watch.json").read_text())
    assert [e["step"] for e in log["entries"]] == [0, 1] and (out / "watch.png").is_file()
    assert all(e["n"] == 2 and 0.0 <= e["accuracy"] <= 1.0 and e["kl"] >= 0.0 for e in log["entries"])
    assert report["watch_restored"] is None and report["watch_best_step"] in (0, 1)
    # Two Llama decoder layers (4 attention + 3 MLP weights + 2 norms each) and the final norm; nothing else.
    assert report["changed_tensors"] == 2 * 9 + 1 and report["total_tensors"] > 200
    parts = report["components"][0]
    # The scalar GRPO optimizes is the calibration part alone: -(Brier + penalties), never the correctness.
    assert report["rewards"][0] == pytest.approx(parts["calibration"], abs=1e-4)
    assert parts["calibration"] == pytest.approx(-parts["brier"], abs=1e-4) and parts["missing"] == 0.0
    assert main(["train-policy", "--grpo", "--reward", "verifier", "--train", "confidence", "--data", str(data),
                 "--out", str(out)]) == 2
    assert "--reward rlcr" in capsys.readouterr().err
