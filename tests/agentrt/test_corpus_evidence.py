"""Issue 39: the abstain estimate is corpus-bound. Whether a question is unanswerable from the index depends on the
user's documents, so a learned router counts only runs over the same corpus as evidence for abstaining there
(agentrt.router.evidence.corpus_key); the answering actions' evidence is shared across corpora."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from agentrt.backends.scripted import ScriptedBackend
from agentrt.core.config import Settings
from agentrt.router import extract, registry
from agentrt.router.learned import LearnedRouter, RouterModel
from agentrt.router.features import vectorize
from agentrt.train.router import load_examples, train_router
from agentrt.trajectory import RewardBreakdown, TaskInfo, TrajectoryRecord, TrajectoryWriter, new_run_id

MISSING = {"has_index": 1.0, "coverage": 0.1, "entity_miss": 2.0, "index_bm25": 1.0, "index_vector": 0.2}
FOUND = {"has_index": 1.0, "coverage": 1.0, "entity_titled": 1.0, "entity_overlap": 1.0, "index_bm25": 9.0,
         "index_vector": 0.8}


def _runs(folder: Path, corpus: str | None) -> Path:
    """Runs over an index named ``corpus`` (None: logged before runs named it): a question whose names the index
    lacks is unanswerable there (abstaining is right), one it holds is answered directly."""
    writer = TrajectoryWriter(folder)
    for i in range(30):
        for answerable, signals in ((True, FOUND), (False, MISSING)):
            q = f"Which team did player {i} join in {1990 + i}?"
            for action in ("direct", "abstain"):
                ok = (action == "direct") == answerable
                step = {"kind": "route_decision", "route": action, "propensity": 0.5,
                        "probabilities": {"direct": 0.5, "abstain": 0.5}, "features": dict(signals)}
                if corpus is not None:
                    step["corpus"] = corpus
                writer.append(TrajectoryRecord(
                    run_id=new_run_id(), created_at=time.time(), question=q, route=action, steps=[step],
                    answer="a", budget={"total": 1000, "spent": 0 if action == "abstain" else 80},
                    usage={"total_tokens": 0 if action == "abstain" else 80}, timings={}, status="ok",
                    task=TaskInfo(ability="qa" if answerable else "unanswerable"), reward=float(ok),
                    rewards={"eval": RewardBreakdown(score=float(ok), correct=ok)}))
    return folder


QUESTION = "Which team did player 77 join in 2031?"


def _x(signals: dict[str, float]) -> list[float]:
    return vectorize(extract(QUESTION, index=lambda q: dict(signals)), QUESTION)


@pytest.fixture(scope="module")
def alpha(tmp_path_factory) -> RouterModel:
    model = train_router([_runs(tmp_path_factory.mktemp("alpha"), "alpha-1f2e3d")], folds=2)
    fp = registry.policy_fingerprint(ScriptedBackend(["x"]))
    name, _, digest = fp.id.partition("@")
    model.provenance = {"policy": {"model": name, "digest": digest, "id": fp.id}, "runs": {"train": 120}}
    return model


def test_runs_over_one_corpus_are_evidence_for_abstaining_over_it_only(alpha, tmp_path):
    path = tmp_path / "router.json"
    alpha.save(path)
    model = RouterModel.load(path)  # the corpora travel in the file
    same, method = model.effective_sizes(_x(MISSING), "alpha-1f2e3d")
    other, _ = model.effective_sizes(_x(MISSING), "my-notes-9a8b7c")
    assert method == "kernel"
    assert same["abstain"] >= 3 and other["abstain"] == 0.0
    # whether direct answers a question carries over to other documents: its evidence is the same over any corpus
    assert other["direct"] == pytest.approx(same["direct"]) and same["direct"] >= 3
    # a caller that does not know the corpus counts every run, as before corpora were recorded
    assert model.effective_sizes(_x(MISSING))[0]["abstain"] == pytest.approx(same["abstain"])


def test_over_documents_it_was_never_fit_on_the_router_says_abstaining_has_no_evidence(alpha):
    fp = registry.policy_fingerprint(ScriptedBackend(["x"]))

    def decide(corpus: str):
        router = LearnedRouter(alpha, Settings(corpus=corpus), policy=fp)
        return asyncio.run(router.decide(QUESTION, extract(QUESTION, index=lambda q: dict(MISSING)), 1000))

    home = decide("alpha-1f2e3d")
    assert home.action == "abstain" and home.state == "calibrated" and home.calibrated
    new = decide("my-notes-9a8b7c")
    assert new.evidence["abstain"] == 0.0 and new.state == "insufficient_evidence" and not new.calibrated
    # runs over other documents resemble it: their estimate is the best there is and still decides (the same
    # decision as over the corpus it was fit on), said as such
    assert new.fallback == "other_corpora" and new.action == "abstain"
    assert new.p_success == home.p_success
    assert "only 0.0 over corpus 'my-notes-9a8b7c'" in new.reason and "the other corpora's" in new.reason
    # the same question without an index: the model's own knowledge, a corpus of its own ("") the router has no
    # abstain runs of (every training run was over an index)
    bare = asyncio.run(LearnedRouter(alpha, Settings(corpus="alpha-1f2e3d"), policy=fp).decide(
        QUESTION, extract(QUESTION), 1000))
    assert bare.evidence["abstain"] == 0.0


def test_a_run_logged_before_runs_named_their_corpus_is_evidence_for_no_corpus(tmp_path):
    legacy = load_examples([_runs(tmp_path / "legacy", None)])
    assert {e.corpus for e in legacy} == {"?"}
    model = train_router([], examples=legacy, folds=2)
    assert model.effective_sizes(_x(MISSING), "alpha-1f2e3d")[0]["abstain"] == 0.0
    assert model.effective_sizes(_x(MISSING), "?")[0]["abstain"] == 0.0
    named = load_examples([_runs(tmp_path / "named", "alpha-1f2e3d")])
    assert {e.corpus for e in named} == {"alpha-1f2e3d"}


def test_a_router_file_without_corpora_counts_every_run(alpha, tmp_path):
    """Files written before corpora were recorded keep their evidence (all rows count for every corpus)."""
    import json

    path = tmp_path / "old.json"
    alpha.save(path)
    data = json.loads(path.read_text())
    for sample in data["evidence"]["actions"].values():
        sample.pop("corpora", None)
    path.write_text(json.dumps(data))
    old = RouterModel.load(path)
    assert old.effective_sizes(_x(MISSING), "my-notes-9a8b7c")[0]["abstain"] >= 3


def test_router_show_says_which_corpora_the_abstain_estimate_has_runs_over(agentrt_home, capsys):
    """The shipped router's abstain estimate rests on runs over the three document corpora it explored and on runs
    without an index; `agentrt router show` says which (a user's own corpus is not among them)."""
    import json

    from agentrt.app.cli import main

    assert main(["router", "show"]) == 0
    shown = json.loads(capsys.readouterr().out)
    corpora = shown["corpora"]["abstain"]
    assert {c.rsplit("-", 1)[0] for c in corpora} == {"", "hotpotqa-index-corpus", "squad-corpus", "docs-corpus"}
    runs = json.loads(Path(shown["file"]).read_text())["evidence"]["actions"]["abstain"]["runs"]
    assert abs(sum(corpora.values()) - runs) <= len(corpora) and all(n > 0 for n in corpora.values())


def test_a_question_run_with_every_action_is_one_point_of_the_evidence_kernel():
    """The kernel's bandwidth is set by the distinct training questions: logging each question once per action
    (`learn --every-action`, six runs; or a free abstain run beside each explored one) must not make a question
    its own nearest neighbours and shrink the kernel to its floor, leaving a new question of the same kind
    without evidence (what adapt_bench showed: 0% of held-out decisions calibrated)."""
    import random

    from agentrt.router import evidence

    rng = random.Random(0)
    xs = [[rng.gauss(0, 1) for _ in range(8)] for _ in range(60)]
    mean, std = [0.0] * 8, [1.0] * 8
    once = evidence.build(xs, ["direct"] * 60, mean, std)
    six = evidence.build([x for x in xs for _ in range(6)], ["direct", "reason", "read", "plan", "ask", "abstain"] * 60,
                         mean, std)
    assert once.bandwidth > evidence.MIN_BANDWIDTH and six.bandwidth == once.bandwidth
    new = [rng.gauss(0, 1) for _ in range(8)]
    assert evidence.effective_sizes(six, new, mean, std)["direct"] >= evidence.MIN_EVIDENCE
