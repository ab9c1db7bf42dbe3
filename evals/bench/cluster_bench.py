"""Benchmark: the whole cluster on one machine — Ray + two vLLM servers + a Chroma server — surviving faults.

    .venv/bin/python -m evals.bench.cluster_bench [--items 24] [--quick] [--no-baseline] [--keep DIR]

What it starts (each in its own process group, stopped by PID / group id at the end, on Ctrl-C and on
failure alike): a Chroma server (``chroma run``), two vLLM OpenAI servers (the CPU build in
``.venv-vllm``, the embedded SmolLM2-135M, fp32, eager, a small KV cache), and ``agentrt eval`` as
the driver, which starts a private local Ray cluster with two actors:

    agentrt --config CFG eval --suite hotpotqa-multiturn --router fixed:direct --executor ray ...
    CFG: policy = "openai:URL_A,URL_B#smol", memory_store = "http://127.0.0.1:PORT", [executor] actors = 2

Each hotpotqa-multiturn item is two turns in one session plus a plan check (route ``plan``: the
planner, searchers over the items' paragraphs in the Chroma server, the answer), so the plan route
runs on every item. The eval indexes the items' corpus (599 paragraphs) into the Chroma server first.

Faults, by results written: at a third of the items vLLM server B is SIGKILLed (its whole process
group: the API server and its engine), and restarted on the same port ``--outage-s`` later; at two
thirds one Ray actor (a ``ray::Worker`` process under the driver) is SIGKILLed. At the end the bench
checks that the restarted server served requests again (its own ``/metrics``).

Then (unless ``--no-baseline``) the same eval runs on server A alone, without faults, for the
throughput ratio. Reported: items done (must be N), duplicates (0), errors, runs retried (result
lines with ``attempt`` > 1), failovers (model calls that failed on one endpoint and were served by
another, from the trajectories' ``backend_events``), what each fault cost, throughput against the
baseline, and whether every trajectory a result names is there, complete, and within its budget.
Prints a markdown table and the machine's load average (other engineers share the CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evals.bench.cluster_procs import ARRIVED, MODEL_NAME, Owned, Server, served, start_vllm, wait_http

from evals.bench.common import ROOT


# -- one eval run -------------------------------------------------------------------------------------

@dataclass
class Run:
    label: str
    out: Path
    home: Path
    wall_s: float = 0.0
    times: dict[str, float] = field(default_factory=dict)  # key -> when its result line was seen (monotonic)
    t0: float = 0.0
    faults: dict[str, float] = field(default_factory=dict)  # fault -> monotonic time
    notes: dict[str, Any] = field(default_factory=dict)


def _config(path: Path, urls: list[str], chroma: str, args: argparse.Namespace) -> Path:
    policy = f"openai:{','.join(urls)}#{MODEL_NAME}?timeout_s={args.timeout_s}&deadline_s={args.deadline_s}"
    path.write_text(
        f'[agentrt]\npolicy = "{policy}"\nmemory_store = "{chroma}"\nembed_threads = 1\n\n'
        f'[agentrt.plan]\nmax_fanout = {args.plan_fanout}\n\n'
        f'[executor]\nkind = "ray"\nactors = {args.actors}\nmax_inflight = {args.max_inflight}\n'
        f'max_attempts = 3\nrespawn = 1\nnum_cpus = {args.actors}\n\n[executor.env]\nHF_HUB_OFFLINE = "1"\n',
        encoding="utf-8")
    return path


def run_eval(owned: Owned, run: Run, config: Path, args: argparse.Namespace, on_progress: Any = None) -> None:
    run.out.mkdir(parents=True, exist_ok=True)
    run.home.mkdir(parents=True, exist_ok=True)
    tmp = run.home / "t"  # Ray's session folder lands here (short: its socket paths must fit 107 bytes)
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "AGENTRT_HOME": str(run.home), "TMPDIR": str(tmp), "RAY_USAGE_STATS_ENABLED": "0",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [str(ROOT / ".venv" / "bin" / "agentrt"), "--config", str(config), "eval", "--suite", "hotpotqa-multiturn",
           "--limit", str(args.items), "--router", "fixed:direct", "--budget", str(args.budget), "--no-progress",
           "--executor", "ray", "--out", str(run.out)]
    log = run.out / "eval.log"
    run.t0 = time.monotonic()
    proc = owned.spawn(cmd, log, env)
    results = run.out / "results.jsonl"
    deadline = run.t0 + args.run_timeout_s
    while proc.poll() is None:
        owned.track(proc)
        _read_times(results, run)
        if on_progress is not None:
            on_progress(run, proc)
        if time.monotonic() > deadline:
            raise RuntimeError(f"{run.label}: the eval ran past --run-timeout-s {args.run_timeout_s}; see {log}")
        time.sleep(0.5)
    _read_times(results, run)
    run.wall_s = time.monotonic() - run.t0
    if proc.returncode != 0:
        raise RuntimeError(f"{run.label}: agentrt eval exited {proc.returncode}: {log.read_text(errors='replace')[-2500:]}")


def _read_times(results: Path, run: Run) -> None:
    if not results.is_file():
        return
    now = time.monotonic()
    for line in results.read_text(encoding="utf-8").splitlines():
        try:
            key = json.loads(line)["key"]
        except (ValueError, KeyError):
            continue  # a line being written
        run.times.setdefault(key, now)


class Faults:
    """Kills server B at a third of the items, restarts it after --outage-s, kills one actor at two thirds."""

    def __init__(self, owned: Owned, b: Server, tmp: Path, args: argparse.Namespace) -> None:
        self.owned, self.b, self.tmp, self.args = owned, b, tmp, args
        self.restarted: Server | None = None
        self.restart_failures = 0
        self.back_s: float | None = None
        self.actor_pid: int | None = None

    def __call__(self, run: Run, proc: subprocess.Popen) -> None:
        done, n, now = len(run.times), self.args.items, time.monotonic()
        if "server_kill" not in run.faults and done >= max(1, n // 3):
            self.owned.stop_group(self.b.proc, signal.SIGKILL)  # the API server and its engine at once
            run.faults["server_kill"] = now
            run.notes["server_kill_done"] = done
            print(f"[{now - run.t0:6.1f}s] {done}/{n} done: SIGKILL vLLM server B (pgid {self.b.proc.pid})", flush=True)
        if "server_kill" in run.faults and "server_restart" not in run.faults \
                and now - run.faults["server_kill"] >= self.args.outage_s:
            run.faults["server_restart"] = now
            self.restarted = start_vllm(self.owned, self.tmp / "b2", self.b.port, "B-restarted", self.args.kv_gib)
            print(f"[{now - run.t0:6.1f}s] restarting server B on port {self.b.port}", flush=True)
        if self.restarted is not None and self.back_s is None and self.restarted.proc.poll() is not None \
                and self.restart_failures < 2:  # it died starting (seen on a loaded machine): start it again
            self.restart_failures += 1
            print(f"[{now - run.t0:6.1f}s] the restarted server B exited while starting; starting it again", flush=True)
            self.restarted = start_vllm(self.owned, self.tmp / f"b{2 + self.restart_failures}", self.b.port,
                                        "B-restarted", self.args.kv_gib)
        if self.restarted is not None and self.back_s is None and self.restarted.proc.poll() is None:
            if served(self.restarted) is not None:
                self.back_s = now
                print(f"[{now - run.t0:6.1f}s] server B is back", flush=True)
        if self.restarted is not None and "first_request" not in run.faults and self.back_s is not None:
            if (served(self.restarted, ARRIVED) or 0) > 0:  # finished, running or queued: a request reached it
                run.faults["first_request"] = now
        if self.restarted is not None and "first_served" not in run.faults and self.back_s is not None:
            if (served(self.restarted) or 0) > 0:
                run.faults["first_served"] = now
                print(f"[{now - run.t0:6.1f}s] the restarted server B served its first request", flush=True)
        if "actor_kill" not in run.faults and done >= max(2, 2 * n // 3):
            workers = [k for k in self.owned.track(proc) if _is_actor(k)]
            if workers:
                victim = min(workers, key=lambda k: k.pid)
                self.actor_pid = victim.pid
                os.kill(victim.pid, signal.SIGKILL)  # one Ray actor: a process under our driver, by its PID
                run.faults["actor_kill"] = now
                run.notes["actor_kill_done"] = done
                print(f"[{now - run.t0:6.1f}s] {done}/{n} done: SIGKILL Ray actor pid {victim.pid}", flush=True)


def _is_actor(proc: Any) -> bool:
    try:
        return " ".join(proc.cmdline()).startswith("ray::Worker")
    except Exception:  # noqa: BLE001 - gone
        return False


# -- checks -------------------------------------------------------------------------------------------

def check(run: Run, n: int, budget: int) -> dict[str, Any]:
    lines = [json.loads(x) for x in (run.out / "results.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    keys = [r["key"] for r in lines]
    from agentrt.trajectory import read_trajectories

    trajectories: dict[str, dict[str, Any]] = {}
    copies = 0
    read = read_trajectories(run.home / "trajectories")
    for rec in read.records:
        t = rec.model_dump(mode="json")
        copies += t["run_id"] in trajectories
        trajectories[t["run_id"]] = t
    by_key: dict[str, list[dict[str, Any]]] = {}
    for t in trajectories.values():
        by_key.setdefault(t.get("metadata", {}).get("task_key"), []).append(t)
    missing, incomplete, named, short = 0, 0, 0, 0
    for r in lines:  # each result names its runs' trajectories (a failed run's record names none: counted below)
        ids = [r.get("trajectory_id")] + [t.get("trajectory_id") for t in r.get("turns") or []]
        ids += [(r.get("plan") or {}).get("trajectory_id")]
        for tid in {i for i in ids if i}:
            named += 1
            t = trajectories.get(tid)
            if t is None:
                missing += 1
            elif not t.get("steps") or t.get("metadata", {}).get("task_key") != r["key"]:
                incomplete += 1
        # one trajectory per run the item asked for: its turns, and its plan check when one ran
        expected = len(r.get("turns") or [1]) + (1 if r.get("plan") else 0)
        short += len(by_key.get(r["key"], [])) < expected
    over_budget = sum(t["budget"]["spent"] > t["budget"]["total"] for t in trajectories.values())
    failed_runs = sum(t["status"] in ("error", "failed") for t in trajectories.values())
    failovers = failed_attempts = 0
    for t in trajectories.values():
        for s in t.get("steps", []):
            for e in s.get("backend_events") or []:
                failovers += e.get("event") == "served"
                failed_attempts += e.get("event") == "attempt_failed"
    times = sorted(run.times.values())
    steady = (len(times) - 1) / (times[-1] - times[0]) * 60 if len(times) > 1 and times[-1] > times[0] else 0.0
    return {"done": len(set(keys)), "n": n, "lines": len(lines), "duplicates": len(keys) - len(set(keys)),
            "errors": sum(r.get("status") == "error" for r in lines),
            "retried": sum(int(r.get("attempt", 1)) > 1 for r in lines),
            "workers": sorted({r.get("worker") for r in lines}), "correct": sum(bool(r.get("correct")) for r in lines),
            "trajectories": len(trajectories), "named": named, "missing": missing, "incomplete": incomplete,
            "over_budget": over_budget, "copies": copies, "short": short, "failed_runs": failed_runs,
            "stray": sum(len(v) for k, v in by_key.items() if k not in set(keys)),
            "unreadable": len(read.problems) + len(read.quarantined),
            "failovers": failovers, "failed_attempts": failed_attempts,
            "wall_s": run.wall_s, "first_s": (times[0] - run.t0) if times else 0.0,
            "items_per_min": steady, "plan_checks": sum(1 for r in lines if r.get("plan")),
            "plan_failed": sum(1 for r in lines if (r.get("plan") or {}).get("status") in ("error", "failed"))}


def fault_costs(run: Run) -> list[tuple[str, str]]:
    """Per fault: the stall (fault -> next result) and the time lost against the pace before it."""
    times = sorted(run.times.values())
    if len(times) < 3:
        return []
    rows = []
    start = times[0]
    kill1, kill2 = run.faults.get("server_kill"), run.faults.get("actor_kill")
    bounds = [("server B killed", kill1, kill2 or times[-1]), ("Ray actor killed", kill2, times[-1])]
    before = [t for t in times if t <= (kill1 or times[-1])]
    pace = (before[-1] - start) / max(1, len(before) - 1) if len(before) > 1 else None
    for name, t_fault, t_end in bounds:
        if t_fault is None:
            continue
        after = [t for t in times if t_fault < t <= t_end]
        stall = (after[0] - t_fault) if after else float("nan")
        lost = (t_end - t_fault) - len(after) * pace if pace else float("nan")
        rows.append((name, f"next result after {stall:.1f} s; {len(after)} items in {t_end - t_fault:.0f} s; "
                           f"~{lost:.0f} s lost vs the pace before the first fault ({pace:.1f} s/item)" if pace else ""))
    return rows


# -- main ---------------------------------------------------------------------------------------------

def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--items", type=int, default=24, help="hotpotqa-multiturn items (N; the suite has 60)")
    ap.add_argument("--quick", action="store_true", help="a small run: 6 items, 20 s outage (overrides --items)")
    ap.add_argument("--budget", type=int, default=384, help="token budget per turn (the plan check gets the plan "
                    "route's minimum)")
    ap.add_argument("--plan-fanout", type=int, default=2, help="searchers one plan may start ([agentrt.plan] "
                    "max_fanout; HotpotQA bridge questions need 2, and each more costs ~110 planner tokens)")
    ap.add_argument("--actors", type=int, default=2, help="Ray actors")
    ap.add_argument("--max-inflight", type=int, default=2, help="runs in flight per actor")
    ap.add_argument("--kv-gib", type=int, default=1, help="KV cache per vLLM server, GiB (VLLM_CPU_KVCACHE_SPACE)")
    ap.add_argument("--outage-s", type=float, default=15.0, help="seconds server B stays dead before its restart")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="the openai backend's per-attempt timeout (a long "
                    "planner call on a loaded CPU takes minutes)")
    ap.add_argument("--deadline-s", type=float, default=900.0, help="the openai backend's per-request deadline")
    ap.add_argument("--run-timeout-s", type=float, default=1500.0, help="give up on one eval run after this long")
    ap.add_argument("--no-baseline", action="store_true", help="skip the one-server, no-fault run")
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it (logs, results, trajectories); "
                    "default: a temp folder, removed at the end")
    return ap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.quick:
        args.items, args.outage_s = 6, 20.0
    if not 3 <= args.items <= 60:
        ap.error("--items must be between 3 and 60 (the suite's size)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from agentrt.backends.vllm_server import free_port

    work = args.keep or Path(tempfile.mkdtemp(prefix="cb", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    owned = Owned()

    def on_signal(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    load_before = _loadavg()
    t_all = time.monotonic()
    fault = base = None
    faults = None
    try:
        chroma_port = free_port()
        chroma_log = work / "chroma.log"
        chroma = owned.spawn([str(ROOT / ".venv" / "bin" / "chroma"), "run", "--path", str(work / "chroma"),
                              "--host", "127.0.0.1", "--port", str(chroma_port)], chroma_log, dict(os.environ))
        a = start_vllm(owned, work / "a", free_port(), "A", args.kv_gib)
        b = start_vllm(owned, work / "b", free_port(), "B", args.kv_gib)
        chroma_s = wait_http(f"http://127.0.0.1:{chroma_port}/api/v2/heartbeat", chroma, chroma_log, 60)
        a_s = wait_http(f"http://127.0.0.1:{a.port}/health", a.proc, a.log, 600)
        b_s = wait_http(f"http://127.0.0.1:{b.port}/health", b.proc, b.log, 600)
        print(f"chroma :{chroma_port} up in {chroma_s:.1f} s; vLLM A :{a.port} and B :{b.port} up in "
              f"{max(a_s, b_s):.0f} s (started together)", flush=True)
        store = f"http://127.0.0.1:{chroma_port}"

        fault = Run("2 servers, faults", work / "fault", work / "hf")
        faults = Faults(owned, b, work, args)
        run_eval(owned, fault, _config(work / "fault.toml", [a.url, b.url], store, args), args, faults)
        after_b = served(faults.restarted) if faults.restarted is not None else None
        if faults.restarted is not None and after_b == 0:  # not served yet: give the monitor its last look
            time.sleep(1)
        fault.notes["restarted_served"] = served(faults.restarted) if faults.restarted is not None else None
        fault.notes["a_served"] = served(a)
        for s in (faults.restarted, b):
            if s is not None:
                owned.stop_group(s.proc)
        if not args.no_baseline:
            base = Run("1 server, no faults", work / "base", work / "hb")
            run_eval(owned, base, _config(work / "base.toml", [a.url], store, args), args)
    except KeyboardInterrupt as e:
        print(f"interrupted ({e}); stopping everything", file=sys.stderr)
        return 130
    finally:
        left = owned.stop_all()
        if left:
            print(f"WARNING: processes still alive after the stop: {left}", file=sys.stderr)
        if sys.exc_info()[0] is not None:
            print(f"logs kept in {work}", file=sys.stderr)
    report(args, fault, base, faults, load_before, time.monotonic() - t_all, left, work)
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _tr(r: dict[str, Any]) -> str:
    return f"{r['trajectories']} / {r['copies']} / {r['unreadable']} / {r['stray']}"


def _bad(r: dict[str, Any]) -> str:
    return f"{r['missing']} / {r['incomplete']} / {r['short']}"


def report(args: argparse.Namespace, fault: Run | None, base: Run | None, faults: Faults | None,
           load_before: str, total_s: float, left: list[int], work: Path) -> None:
    if fault is None:
        return
    f = check(fault, args.items, args.budget)
    b = check(base, args.items, args.budget) if base is not None else None
    rows = [("items done / N", f"{f['done']} / {f['n']}", f"{b['done']} / {b['n']}" if b else "-"),
            ("result lines, duplicates", f"{f['lines']}, {f['duplicates']}", f"{b['lines']}, {b['duplicates']}" if b else "-"),
            ("error records", str(f["errors"]), str(b["errors"]) if b else "-"),
            ("runs retried (attempt > 1)", str(f["retried"]), str(b["retried"]) if b else "-"),
            ("failovers (served elsewhere) / failed attempts", f"{f['failovers']} / {f['failed_attempts']}",
             f"{b['failovers']} / {b['failed_attempts']}" if b else "-"),
            ("trajectories: written / copies / unreadable / stray", _tr(f), _tr(b) if b else "-"),
            ("results naming a missing or foreign trajectory, or short of one", _bad(f), _bad(b) if b else "-"),
            ("failed runs (status failed) / over budget", f"{f['failed_runs']} / {f['over_budget']}",
             f"{b['failed_runs']} / {b['over_budget']}" if b else "-"),
            ("plan checks run / failed", f"{f['plan_checks']} / {f['plan_failed']}",
             f"{b['plan_checks']} / {b['plan_failed']}" if b else "-"),
            ("correct (last turn)", str(f["correct"]), str(b["correct"]) if b else "-"),
            ("eval wall s (first result at s)", f"{f['wall_s']:.0f} ({f['first_s']:.0f})",
             f"{b['wall_s']:.0f} ({b['first_s']:.0f})" if b else "-"),
            ("items/min, first to last result", f"{f['items_per_min']:.2f}", f"{b['items_per_min']:.2f}" if b else "-")]
    if b and b["items_per_min"]:
        rows.append(("throughput ratio (faults / baseline)", f"{f['items_per_min'] / b['items_per_min']:.2f}x", "1.00x"))
    print(f"\n## Cluster bench: {args.items} hotpotqa-multiturn items, {args.actors} Ray actors x {args.max_inflight}, "
          f"vLLM SmolLM2-135M fp32 (KV {args.kv_gib} GiB each), Chroma server\n")
    print("| | 2 servers, server B and one actor killed | 1 server, no faults |\n|---|---|---|")
    for name, x, y in rows:
        print(f"| {name} | {x} | {y} |")
    print("\n| fault | cost |\n|---|---|")
    for name, text in fault_costs(fault):
        print(f"| {name} | {text} |")
    t = fault.faults
    if "server_restart" in t:
        back = (faults.back_s - t["server_restart"]) if faults and faults.back_s else None
        used = (t["first_served"] - t["server_restart"]) if "first_served" in t else None
        tries = f"; it died starting {faults.restart_failures}x and was started again" if faults and faults.restart_failures else ""
        if back is None:
            text = f"not healthy before the eval ended ({fault.wall_s - (t['server_restart'] - fault.t0):.0f} s after the restart){tries}"
        elif used is None:
            text = f"healthy {back:.0f} s after the restart{tries}; NOT used again (served {fault.notes.get('restarted_served')})"
        else:
            text = (f"healthy {back:.0f} s after the restart{tries}; first request on it "
                    f"{t.get('first_request', t['first_served']) - faults.back_s:.0f} s and first one finished "
                    f"{t['first_served'] - faults.back_s:.0f} s after it was healthy; "
                    f"{fault.notes.get('restarted_served')} requests served by it in all "
                    f"(A: {fault.notes.get('a_served')})")
        print(f"| server B restarted | {text} |")
    print(f"\nall trajectories there and complete: {_bad(f) == '0 / 0 / 0' and f['copies'] == f['unreadable'] == 0}; "
          f"every budget held: "
          f"{f['over_budget'] == 0}; processes left behind: {len(left)}; bench total {total_s:.0f} s; "
          f"load average before {load_before}, after {_loadavg()} (2 cores, shared)")
    if args.keep is not None:
        print(f"logs, results and trajectories kept in {work}")


if __name__ == "__main__":
    sys.exit(main())
