"""The strategy environment's training (issue 36): the outcome cache, the split, the reward, and a real GRPO run
through ``agentrt train-policy --grpo --env strategy`` whose policy then routes as ``self:PATH``."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from agentrt.core.config import Settings
from agentrt.core.errors import InputError
from agentrt.router import make_router
from agentrt.router.features import extract
from agentrt.router.selfpolicy import CALIBRATION_FILE, SelfCalibration
from agentrt.train.outcomes import OutcomeCache, load_outcomes
from agentrt.train.strategy import INVALID_REWARD, RewardStats, reward_fn, split
from agentrt.trajectory import TrajectoryRecord, TrajectoryWriter, new_run_id

# (family, item, question, {route: (score, tokens)}): what an exploration logged; the right route differs by family
LOGS = [("arith", f"a{i}", f"What is {i + 11} * {i + 3}?", {"direct": (0.0, 60), "reason": (1.0, 500), "abstain": (0.0, 0)})
        for i in range(6)] + \
       [("easy", f"e{i}", f"What is the capital of country {c}?", {"direct": (1.0, 50), "reason": (1.0, 450),
                                                                    "abstain": (0.0, 0)})
        for i, c in enumerate(["France", "Italy", "Japan", "Spain", "Egypt", "Peru"])] + \
       [("unanswerable", f"u{i}", f"What will the lottery numbers be on day {i}?", {"direct": (0.0, 40),
                                                                                    "abstain": (1.0, 0)})
        for i in range(6)]


def _write_logs(folder, repeat_first: bool = False):
    writer = TrajectoryWriter(folder)
    for family, item, q, routes in LOGS:
        for route, (score, tokens) in routes.items():
            for _ in range(2 if repeat_first and item == "a0" and route == "direct" else 1):
                writer.append(TrajectoryRecord(
                    run_id=new_run_id(), created_at=time.time(), question=q, route=route, steps=[], answer="x",
                    budget={"total": 1000, "spent": tokens}, usage={"total_tokens": tokens}, timings={}, status="ok",
                    reward=score, metadata={"task_key": f"explore|{family}|{item}|0"}))
    return folder


def test_the_outcome_cache_reads_exploration_logs(tmp_path):
    cache = OutcomeCache.from_trajectories([_write_logs(tmp_path / "logs")])
    assert cache.summary()["questions_per_family"] == {"arith": 6, "easy": 6, "unanswerable": 6}
    q = LOGS[0][2]
    # the environment's outcomes callable: by item id or by question; a route nobody ran is missing (None)
    assert cache("arith/a0", "reason") == cache.lookup(q, "reason") == (1.0, 500.0)
    assert cache(q, "plan") is None and (q, "plan") in cache.missing([q], ["plan", "reason"])
    assert cache.cells[(q, "reason")].reward(0.3) == pytest.approx(1.0 - 0.3 * 500 / 1000)
    # a missing cell in training: the route's mean in the question's family, else over all families, else 0
    means = cache.means(cache.questions, 0.3)
    unanswerable = LOGS[-1][2]
    assert cache.estimate(unanswerable, "reason", 0.3, means) == (pytest.approx(means[("*", "reason")][0]), "route")
    assert cache.estimate(unanswerable, "plan", 0.3, means) == (0.0, "missing")
    assert cache.estimate(q, "reason", 0.3, means)[1] == "cache"
    # the cache file: JSON lines that load back the same cells, and merge with trajectories as --outcomes
    path = tmp_path / "x.cells.jsonl"
    cache.save(path)
    again = OutcomeCache.load(path)
    assert again.cells == cache.cells and again("arith/a0", "reason") == (1.0, 500.0)
    assert load_outcomes([path]).cells == cache.cells


def test_repeated_runs_of_a_cell_keep_the_mean(tmp_path):
    writer_dir = _write_logs(tmp_path / "logs", repeat_first=True)
    TrajectoryWriter(writer_dir).append(TrajectoryRecord(
        run_id=new_run_id(), created_at=time.time(), question=LOGS[0][2], route="direct", steps=[], answer="x",
        budget={"total": 1000, "spent": 100}, usage={"total_tokens": 100}, timings={}, status="ok", reward=1.0,
        metadata={"task_key": "explore|arith|a0|1"}))
    cell = OutcomeCache.from_trajectories([writer_dir]).cells[(LOGS[0][2], "direct")]
    assert cell.n == 3 and cell.score == pytest.approx(1 / 3) and cell.tokens == pytest.approx((60 + 60 + 100) / 3)


def test_split_by_family_and_by_question(tmp_path):
    cache = OutcomeCache.from_trajectories([_write_logs(tmp_path / "logs")])
    train, held = split(cache, holdout=0.0, leave_out=("unanswerable",))
    assert {cache.families[q] for q in held} == {"unanswerable"} and len(train) == 12
    # the fallback's means come from the training questions only: held-out cells never leak into a reward
    means = cache.means(train, 0.3)
    assert ("unanswerable", "abstain") not in means and means[("*", "abstain")][0] == 0.0
    train2, held2 = split(cache, holdout=0.5)
    assert set(train2) | set(held2) == set(cache.questions) and held2 and train2 and split(cache, holdout=0.5) == (train2, held2)
    with pytest.raises(InputError, match="no questions of family"):
        split(cache, leave_out=("docs",))


def test_the_reward_reads_the_label_from_the_completion(tmp_path):
    cache = OutcomeCache.from_trajectories([_write_logs(tmp_path / "logs")])
    stats = RewardStats()
    fn = reward_fn(cache, 0.3, cache.means(cache.questions, 0.3), stats)
    q = LOGS[0][2]
    got = fn(completions=[[{"role": "assistant", "content": "Reason."}], [{"role": "assistant", "content": "hmm"}],
                          [{"role": "assistant", "content": "plan"}]], question=[q, q, q])
    assert got[0] == pytest.approx(1.0 - 0.3 * 0.5) and got[1] == INVALID_REWARD
    assert stats.cache == 1 and stats.invalid == 1 and stats.missing == 1


def test_a_bare_strategy_run_trains_on_full_information_groups(tmp_path, monkeypatch):
    """Without --num-generations / --batch-size, --env strategy deals groups of 6 (each label once) in batches of
    12, what the bench measured (docs/environments.md); GRPO on prompt data keeps groups of 4."""
    import agentrt.train.grpo as grpo
    import agentrt.train.strategy as strategy
    from agentrt.app.cli import main

    seen: dict[str, dict] = {}

    class Stop(Exception):
        pass

    def capture(name):
        def fn(*args, **kwargs):
            seen[name] = kwargs
            raise Stop
        return fn

    monkeypatch.setattr(strategy, "train_strategy", capture("strategy"))
    monkeypatch.setattr(grpo, "train_grpo", capture("grpo"))
    logs = _write_logs(tmp_path / "logs")
    for argv in (["--env", "strategy", "--outcomes", str(logs), "--holdout", "0"], []):
        try:
            main(["train-policy", "--grpo", "--out", str(tmp_path / "p"), *argv])
        except Stop:
            pass
    assert (seen["strategy"]["num_generations"], seen["strategy"]["batch_size"]) == (6, 12)
    assert (seen["grpo"]["num_generations"], seen["grpo"]["batch_size"]) == (4, 4)


def test_train_policy_on_the_strategy_env_and_route_with_it(tmp_path, capsys):
    from agentrt.app.cli import main

    logs = _write_logs(tmp_path / "logs")
    out = tmp_path / "policy"
    code = main(["train-policy", "--grpo", "--env", "strategy", "--outcomes", str(logs), "--leave-out", "unanswerable",
                 "--holdout", "0", "--out", str(out), "--steps", "2", "--num-generations", "2", "--batch-size", "4",
                 "--max-completion-length", "3", "--train-layers", "2", "--watch-every", "1", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["steps"] == 2 and report["changed_tensors"] > 0 and report["max_abs_delta"] > 0
    assert report["training_questions"] == 12 and report["held_out"] == 6
    assert sum(report["sources"].values()) == 2 * 4  # every completion was rewarded, from the cache or a fallback
    watch = json.loads((out / "watch.json").read_text())
    assert [e["step"] for e in watch["entries"]][:1] == [0] and all(e["kl"] is not None for e in watch["entries"])
    cal = SelfCalibration.load(out / CALIBRATION_FILE)
    # calibrated on the training questions only: reason ran on arith and easy (12 cells), never on unanswerable
    assert cal.actions["reason"].runs == 12 and cal.actions["abstain"].runs == 12
    assert cal.actions["reason"].tokens == pytest.approx((6 * 500 + 6 * 450) / 12)
    router = make_router(f"self:{out}", Settings())
    q = "What is 14 * 6?"
    # the router (the hf backend's scoring pass) reads the same label distribution training moved
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrt.train.strategy import label_distributions

    trained = label_distributions(AutoModelForCausalLM.from_pretrained(out), AutoTokenizer.from_pretrained(out), [q])[0]
    routed = asyncio.run(router.label_distribution(q))
    assert all(abs(trained[a] - routed[a]) < 1e-3 for a in trained), (trained, routed)
    d = asyncio.run(router.decide(q, extract(q), 1000))
    assert d.router == "self" and d.action in ("direct", "reason") and d.propensity == 1.0
    assert set(d.evidence) == set(cal.actions) and d.state in ("calibrated", "insufficient_evidence")


def test_a_checkpointed_strategy_run_resumes_where_it_stopped(tmp_path, capsys):
    from agentrt.app.cli import main

    logs = _write_logs(tmp_path / "logs")
    out = tmp_path / "policy"
    args = ["train-policy", "--grpo", "--env", "strategy", "--outcomes", str(logs), "--holdout", "0", "--out", str(out),
            "--num-generations", "2", "--batch-size", "4", "--max-completion-length", "3", "--train-layers", "2",
            "--checkpoint-every", "2", "--json"]
    assert main([*args, "--steps", "2"]) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert first["steps"] == 2 and (out / "checkpoint-2").is_dir()
    assert main([*args, "--steps", "3"]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # resumed from checkpoint-2: one more step, so only that step's 4 completions were rewarded in this run
    assert again["steps"] == 3 and sum(again["sources"].values()) == 4, again["sources"]
    assert (out / CALIBRATION_FILE).is_file()


def test_the_exploration_share_tries_every_label_in_a_group():
    """On this question the base policy gives ``direct`` 94% of its label mass and ``plan``, ``ask``, ``abstain``
    about 1% each: drawn only from the policy, a group of 12 misses some label, so GRPO never learns its worth. With
    an exploration share of 0.5 half of each group is dealt uniformly over the six labels; with the default (1) a
    group of six holds each label once. The logprobs GRPO is handed stay the policy's own."""
    from types import SimpleNamespace

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrt.backends.embedded import embedded_model_path
    from agentrt.core.types import ROUTES
    from agentrt.router.selfpolicy import messages
    from agentrt.train.strategy import label_logprobs, label_rollout

    folder = embedded_model_path(Settings().models_dir)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    prompts = [[m.to_dict() for m in messages("Who directed the film that won Best Picture in 1998?")]] * 12
    trainer = SimpleNamespace(model=model, processing_class=tokenizer, num_generations=12)

    def labels(out):
        return [tokenizer.decode(ids) for ids in out["completion_ids"]]

    on_policy = labels(label_rollout(seed=0, explore_share=0.0)(prompts, trainer))
    assert set(on_policy) < set(ROUTES) and on_policy.count("direct") >= 8, on_policy
    out = label_rollout(seed=0, explore_share=0.5)(prompts, trainer)
    got = labels(out)
    assert set(got) == set(ROUTES), got
    own = label_logprobs(model, tokenizer, out["prompt_ids"][:1])[0]
    assert all(lp == pytest.approx(own[a]) for lp, a in zip(out["logprobs"], got))
    # the default, full information: every group of six holds each label once, whatever the policy prefers
    full = labels(label_rollout(seed=1)(prompts, SimpleNamespace(model=model, processing_class=tokenizer,
                                                                 num_generations=6)))
    assert sorted(full[:6]) == sorted(full[6:]) == sorted(ROUTES), full
    with pytest.raises(InputError, match="--explore-share"):
        label_rollout(explore_share=1.5)
