"""Issue 56, item 5: feedback only on responses the server served and stored, once each, bounded, behind the
key; and a flood of verdicts that pushes always-abstain is refused by ``learn --traffic`` (by a named check).

Real ``agentrt serve`` processes with the embedded model, real HTTP, the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from _servers import running_server

ROOT = Path(__file__).resolve().parents[2]
AGENTRT = str(Path(sys.executable).parent / "agentrt")

pytestmark = pytest.mark.slow


def _chat(base: str, question: str, **extra) -> dict:
    body = {"model": "agentrt", "messages": [{"role": "user", "content": question}], "budget": 200, **extra}
    r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def _verdict(base: str, rid: str, **body) -> httpx.Response:
    return httpx.post(f"{base}/v1/feedback", json={"id": rid, **body}, timeout=60)


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "AGENTRT_HOME": str(home)}
    return subprocess.run([AGENTRT, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)


def _verdict_lines(home: Path) -> list[dict]:
    path = home / "trajectories" / "feedback.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def test_feedback_only_on_served_stored_runs_once_bounded_and_a_flood_is_refused_by_the_learner(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "AGENTRT_HOME": str(home), "AGENTRT_ANSWER_MAX_TOKENS": "12"}
    with running_server([AGENTRT, "serve", "--explore", "0.3"], home, env, poll_s=0.5) as base:
        # ids this server never issued, or issued for nothing it keeps a verdict on: 404
        assert _verdict(base, "chatcmpl-" + "0" * 32, correct=True).status_code == 404
        done = httpx.post(f"{base}/v1/completions", json={"model": "agentrt", "prompt": "Paris is", "max_tokens": 2},
                          timeout=300)
        assert done.status_code == 200, done.text
        cmpl = _verdict(base, done.json()["id"], correct=True)
        assert cmpl.status_code == 404 and "/v1/completions" in cmpl.json()["error"]["message"]
        unstored = httpx.post(f"{base}/v1/responses", json={"model": "agentrt", "input": "Who are you?",
                                                            "route": "abstain", "store": False}, timeout=300)
        assert unstored.status_code == 200, unstored.text
        refused = _verdict(base, unstored.json()["id"], correct=True)
        assert refused.status_code == 404 and "store: false" in refused.json()["error"]["message"]
        stored = httpx.post(f"{base}/v1/responses", json={"model": "agentrt", "input": "Who are you?",
                                                          "route": "abstain"}, timeout=300)
        assert _verdict(base, stored.json()["id"], correct=False).status_code == 200
        first = _chat(base, "Who was the mayor of Ashby Parva in 1851?", route="abstain")
        bare = _verdict(base, first["agentrt"]["trajectory_id"], correct=True)  # the run id, not a response id
        assert bare.status_code == 404
        # one verdict per response: the second is a 409, and the store holds one
        assert _verdict(base, first["id"], correct=True).status_code == 200
        again = _verdict(base, first["id"], correct=False)
        assert again.status_code == 409 and again.json()["error"]["code"] == "feedback_exists"
        assert [v["correct"] for v in _verdict_lines(home) if v["run_id"] == first["agentrt"]["trajectory_id"]] == [True]
        # a record's size is bounded, and so is the body
        long = _verdict(base, "chatcmpl-" + "1" * 32, correct=True, note="x" * 501)
        assert long.status_code == 400 and long.json()["error"]["param"] == "note"
        huge = httpx.post(f"{base}/v1/feedback", content=b'{"id": "' + b"a" * (2 << 20) + b'"}',
                          headers={"content-type": "application/json"}, timeout=60)
        assert huge.status_code == 413
        # 2. the flood: 15 more questions forced to abstain and marked right, 9 routed runs marked wrong
        for i in range(15):
            r = _chat(base, f"Who was the mayor of Little Snoring in {1852 + i}?", route="abstain")
            assert _verdict(base, r["id"], correct=True).status_code == 200
        for c in ["France", "Italy", "Spain", "Germany", "Japan", "Canada", "Egypt", "Kenya", "Peru"]:
            r = _chat(base, f"What is the capital of {c}?")
            assert _verdict(base, r["id"], correct=False).status_code == 200
        # a flood of verdicts is cut by the rate bound (429 with Retry-After), before any lookup
        with httpx.Client(timeout=60) as client:  # one connection: far faster than the 10 a second it allows
            codes = [client.post(f"{base}/v1/feedback", json={"id": "chatcmpl-nope", "correct": True})
                     for _ in range(200)]
        limited = [r for r in codes if r.status_code == 429]
        assert limited and all(r.status_code in (404, 429) for r in codes) and limited[0].headers["retry-after"]
    learned = _cli(home, "learn", "--traffic", "--out", str(tmp_path / "learn"), "--bootstrap", "100")
    assert learned.returncode == 1, learned.stdout + learned.stderr
    assert "refused to train a candidate" in learned.stdout and "check too-few-questions" in learned.stdout
    assert "check forced-route: left out 17 runs" in learned.stderr  # the forced abstains carry no propensity
    report = json.loads((tmp_path / "learn" / "traffic-report.json").read_text())
    assert report["step"] == "refused" and report["refused"]
    listed = json.loads(_cli(home, "router", "list", "--json").stdout)
    assert listed["observing"] is None and listed["in_use"].startswith("shipped:")


def test_feedback_needs_the_key_when_the_server_has_one(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "AGENTRT_HOME": str(home)}
    with running_server([AGENTRT, "serve", "--api-key", "s3cret", "--route", "abstain"], home, env, poll_s=0.5) as base:
        key = {"Authorization": "Bearer s3cret"}
        r = httpx.post(f"{base}/v1/chat/completions", headers=key, timeout=300,
                       json={"model": "agentrt", "messages": [{"role": "user", "content": "Who was the mayor?"}]})
        assert r.status_code == 200, r.text
        rid = r.json()["id"]
        assert httpx.post(f"{base}/v1/feedback", json={"id": rid, "correct": True}).status_code == 401
        assert _verdict_lines(home) == []
        ok = httpx.post(f"{base}/v1/feedback", json={"id": rid, "correct": True}, headers=key)
        assert ok.status_code == 200, ok.text
