"""Issue 39: the router learns from its own traffic, end to end on `agentrt serve` with the embedded model.

A user who wants the capital of a country answered, and an honest "don't know" on the mayor of an obscure
town (the 135M model would make one up): requests, their verdicts by ``POST /v1/feedback`` (by response id),
``agentrt learn --traffic`` (a candidate trained on those runs, put under observation), live requests that the
candidate decides in shadow (recorded, never acted on), ``learn --traffic`` again (its would-be decisions
valued off-policy, DR with a bootstrap interval, against the router in use), promotion, and the promoted
router deciding the next request: all visible in ``agentrt router list``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from _servers import running_server

ROOT = Path(__file__).resolve().parents[2]
AGENTRT = str(Path(sys.executable).parent / "agentrt")

pytestmark = pytest.mark.slow

COUNTRIES = ["France", "Italy", "Spain", "Germany", "Japan", "Canada", "Egypt", "Kenya", "Peru", "Chile", "Norway",
             "Sweden", "Poland", "Greece", "Turkey", "India", "China", "Brazil", "Mexico", "Cuba", "Iran", "Iraq",
             "Nepal", "Ghana", "Mali", "Chad", "Fiji", "Laos", "Oman", "Qatar"]
TOWNS = ["Ashby Parva", "Little Snoring", "Nether Wallop", "Much Wenlock", "Great Snoring", "Steeple Bumpstead",
         "Shepton Beauchamp", "Upper Slaughter", "Lower Slaughter", "Long Sutton", "Chipping Ongar", "Bishops Itchington",
         "Kings Ripton", "Abbots Bromley", "Temple Grafton", "Monks Eleigh", "Castle Camps", "Helions Bumpstead",
         "Toller Porcorum", "Ryme Intrinseca", "Sixpenny Handley", "Wyre Piddle", "Potterne Wick", "Sutton Veny",
         "Wool", "Puddletown", "Beer", "Ugley", "Crapstone", "Idle"]


def _capital(c: str) -> str:
    return f"What is the capital of {c}?"


def _mayor(town: str, i: int) -> str:
    return f"Who was the mayor of {town} in {1850 + 3 * i}?"


def _right(question: str, route: str) -> bool:
    """The user: capitals answered directly, obscure mayors met with an honest abstention."""
    return route == ("direct" if question.startswith("What is the capital") else "abstain")


def _ask(base: str, question: str, **extra) -> dict:
    body = {"model": "agentrt", "messages": [{"role": "user", "content": question}], "budget": 200, **extra}
    r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def _feedback(base: str, question: str, response: dict) -> None:
    route = response["agentrt"]["route"]
    for _ in range(20):  # a batch of verdicts past the server's burst waits as Retry-After says, as a client should
        r = httpx.post(f"{base}/v1/feedback", json={"id": response["id"], "correct": _right(question, route)},
                       timeout=30)
        if r.status_code != 429:
            break
        time.sleep(float(r.headers["Retry-After"]))
    assert r.status_code == 200, r.text
    assert r.json()["run_id"] == response["agentrt"]["trajectory_id"]


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "AGENTRT_HOME": str(home)}
    return subprocess.run([AGENTRT, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_traffic_feedback_learn_observe_promote(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "AGENTRT_HOME": str(home), "AGENTRT_ANSWER_MAX_TOKENS": "12"}
    with running_server([AGENTRT, "serve", "--explore", "0.3"], home, env, poll_s=0.5) as base:
        # an unknown response id is a 404 in OpenAI's error shape; a bad verdict a 400
        r = httpx.post(f"{base}/v1/feedback", json={"id": "chatcmpl-nope", "correct": True})
        assert r.status_code == 404 and r.json()["error"]["code"] == "run_not_found"
        # 1. traffic: each training question once by each route (a logging experiment), then the user's verdicts
        train = [(_capital(c), route) for c in COUNTRIES[:22] for route in ("direct", "abstain")]
        train += [(_mayor(t, i), route) for i, t in enumerate(TOWNS[:22]) for route in ("direct", "abstain")]
        with ThreadPoolExecutor(4) as pool:
            responses = list(pool.map(lambda qr: _ask(base, qr[0], route=qr[1]), train))
        first = responses[0]
        bad = httpx.post(f"{base}/v1/feedback", json={"id": first["id"], "reward": 2})
        assert bad.status_code == 400 and "reward must be a number in [0, 1]" in bad.json()["error"]["message"]
        for (q, _), resp in zip(train, responses):
            _feedback(base, q, resp)
        # 2. learn --traffic: a candidate, put under observation (not promoted)
        done = _cli(home, "learn", "--traffic", "--out", str(tmp_path / "learn"), "--bootstrap", "300")
        assert done.returncode == 0, done.stderr
        assert "observing r001" in done.stdout
        listed = json.loads(_cli(home, "router", "list", "--json").stdout)
        assert listed["observing"] == "r001" and listed["in_use"].startswith("shipped:")
        status = {r["version"]: r["status"] for r in listed["routers"]}
        assert status["r001"] == "observing (shadow)"
        # 3. live traffic, routed by the router in use (exploring), the candidate deciding in shadow
        live = [_capital(c) for c in COUNTRIES[22:]] + [_mayor(t, i) for i, t in enumerate(TOWNS[22:], start=22)]
        with ThreadPoolExecutor(4) as pool:
            answered = list(pool.map(lambda q: _ask(base, q), live))
        for q, resp in zip(live, answered):
            decision = resp["agentrt"]["decision"]
            assert decision["state"] in ("calibrated", "insufficient_evidence") and decision["evidence"]
            shadow = decision["shadow"]
            assert shadow["router_version"] == "r001" and shadow["action"] in ("direct", "abstain")
            _feedback(base, q, resp)
        # what the candidate would do, it learned from the feedback: abstain on the mayors, answer the capitals
        shadows = {q: resp["agentrt"]["decision"]["shadow"]["action"] for q, resp in zip(live, answered)}
        assert sum(shadows[q] == "abstain" for q in live if "mayor" in q) >= 6
        assert sum(shadows[q] == "direct" for q in live if "capital" in q) >= 6
        # no extra model tokens: the shadow decision is numbers, and the run spent within its budget
        for resp in answered:
            assert resp["usage"]["total_tokens"] <= 200
        # 4. learn --traffic again: the shadow decisions valued off-policy, the gate promotes
        judged = _cli(home, "learn", "--traffic", "--out", str(tmp_path / "learn"), "--bootstrap", "300")
        assert judged.returncode == 0, judged.stderr
        report = json.loads((tmp_path / "learn" / "traffic-report.json").read_text())
        assert report["step"] == "judged" and report["observed"] == len(live)
        lo, hi = report["verdict"]["interval"]
        assert report["candidate"]["value"] > report["incumbent"]["value"] and lo > 0, judged.stdout
        assert report["promoted"] is True and "promoted r001" in judged.stdout
        listed = json.loads(_cli(home, "router", "list", "--json").stdout)
        assert listed["in_use"] == "r001" and listed["observing"] is None
        shown = json.loads(_cli(home, "router", "show", "r001").stdout)
        assert shown["observe"]["status"] == "promoted" and shown["observe"]["verdict"]["promote"] is True
        # 5. the next request is decided by the promoted router (no restart)
        after = _ask(base, _mayor("Nether Stowey", 40))
        assert after["agentrt"]["decision"]["router_version"] == "r001"
