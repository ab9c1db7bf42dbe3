"""Startup bench: how long ``agentrt run --route direct "..."`` takes from the shell to its answer on the
embedded model, and where the time goes.

    .venv/bin/python -m evals.bench.startup_bench [--runs 5] [--question "What is the capital of France?"]

Two kinds of runs, alternated so machine load hits both alike:

* ``agentrt run``: the installed command as a user types it; its wall and CPU time (spawn to exit).
* probe: the same CLI (``agentrt.app.cli.main``) in a ``python -c`` that stamps the clock at each stage:
  interpreter up, CLI imports + settings + preflight done (``load_backend`` called), torch/transformers and
  the hf backend imported, weights loaded, the run returned, ``main`` returned / ``os._exit`` called;
  the parent stamps the process's end. The stamps go to a file, not stdout.

Each probe also runs "before": the same run on transformers' model classes (``AGENTRT_HF_IMPL=transformers``,
as every run went before the lean Llama of ``agentrt/backends/hf/llama.py``), for an A/B under the same load;
its import stage imports what the hf backend imported then (transformers' Auto classes and the attention
hooks of ``hf/cpu_speed.py``). Prints one table of medians (seconds). Runs use a temporary ``AGENTRT_HOME``
and the converted model of ``$AGENTRT_MODELS_DIR`` (default ``~/.cache/agentrt/models``; the first run converts it there when missing).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evals.bench.common import DEFAULT_HOME, parser

PROBE = r"""
import json, os, sys, time
stamps = {}

def stamp(name):
    stamps[name] = (time.time(), time.process_time())

stamp("interp")
out = os.environ["STARTUP_PROBE_OUT"]

def dump():
    with open(out, "w") as f:
        json.dump(stamps, f)

import agentrt.backends as backends
real_load = backends.load_backend

BEFORE = os.environ.get("STARTUP_PROBE_BEFORE") == "1"

def load_backend(*a, **k):
    stamp("load_called")
    if BEFORE:  # what the hf backend imported before the lean Llama: transformers' model classes
        import agentrt.backends.hf.lean_imports
        from transformers import AutoModelForCausalLM, AutoTokenizer, AttentionInterface
        import transformers.integrations.sdpa_attention, transformers.masking_utils
    import agentrt.backends.hf  # torch, the tokenizer's transformers and our backend: what the hf load imports
    stamp("imported")
    b = real_load(*a, **k)
    stamp("loaded")
    return b

backends.load_backend = load_backend

from agentrt.app import agent as agent_mod
real_run = agent_mod.Agent.run

def run(self, *a, **k):
    r = real_run(self, *a, **k)
    stamp("answered")
    return r

agent_mod.Agent.run = run
real_exit = os._exit

def fast_exit(code):
    stamp("exit")
    dump()
    real_exit(code)

os._exit = fast_exit
from agentrt.app.cli import main
sys.argv[0] = "agentrt"  # as the console script: the command may end its process itself (run.exit_now)
rc = main(sys.argv[1:])
stamp("exit")
dump()
sys.exit(rc)
"""


def _env(home: str, models: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTRT_")}
    return {**env, "AGENTRT_HOME": home, "AGENTRT_MODELS_DIR": models}


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_cli(exe: Path, argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one ``agentrt run``."""
    t0, c0 = time.time(), _child_cpu()
    p = subprocess.run([str(exe), *argv], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"agentrt run failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    return time.time() - t0, _child_cpu() - c0


STAGES = [("python start", None, "interp"), ("cli imports + preflight", "interp", "load_called"),
          ("torch (+transformers) import", "load_called", "imported"), ("model load", "imported", "loaded"),
          ("generation (the run)", "loaded", "answered"), ("print + exit", "answered", None)]


def run_probe(argv: list[str], env: dict[str, str], before: bool = False) -> dict[str, tuple[float, float]]:
    """Stage -> (wall, CPU) seconds of one instrumented run; ``before``: on transformers' model classes
    (``AGENTRT_HF_IMPL=transformers``), as every run went before the lean Llama."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    t0, c0 = time.time(), _child_cpu()
    probe_env = {**env, "STARTUP_PROBE_OUT": out, "STARTUP_PROBE_BEFORE": "1" if before else "0",
                 **({"AGENTRT_HF_IMPL": "transformers"} if before else {})}
    p = subprocess.run([sys.executable, "-c", PROBE, *argv], env=probe_env,
                       capture_output=True, text=True)
    end, cpu = time.time(), _child_cpu() - c0
    if p.returncode != 0:
        sys.exit(f"probe failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    s = json.loads(Path(out).read_text())
    os.unlink(out)
    s["start"], s["end"] = (t0, 0.0), (end, cpu)
    return {name: (s[b or "end"][0] - s[a or "start"][0], s[b or "end"][1] - s[a or "start"][1])
            for name, a, b in STAGES} | {"probe total": (end - t0, cpu)}


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--runs", type=int, default=5, help="runs of each kind (default 5)")
    ap.add_argument("--question", default="What is the capital of France?")
    args = ap.parse_args()
    exe = Path(sys.executable).with_name("agentrt")
    models = os.environ.get("AGENTRT_MODELS_DIR") or str(DEFAULT_HOME / "models")
    argv = ["run", "--route", "direct", args.question]
    with tempfile.TemporaryDirectory() as home:
        env = _env(home, models)
        run_cli(exe, argv, env)  # warm-up: converts the model once when missing, fills the page cache
        walls, now, before = [], [], []
        for _ in range(args.runs):  # alternated: machine load hits every kind alike
            walls.append(run_cli(exe, argv, env))
            now.append(run_probe(argv, env))
            before.append(run_probe(argv, env, before=True))
    load = os.getloadavg()[0]
    print(f"`agentrt run --route direct {args.question!r}` on the embedded model: median (min-max) of {args.runs} "
          f"runs; load average {load:.1f} on {os.cpu_count()} CPUs")
    print("now: this tree (the lean Llama). before: the same run on transformers' model classes "
          "(AGENTRT_HF_IMPL=transformers), as before agentrt/backends/hf/llama.py.")
    print("CPU = user + sys seconds of the process: what the wall time approaches on an idle core\n")
    print(f"| {'stage':<26} | {'now wall s':>16} | {'now CPU s':>16} | {'before wall s':>16} | {'before CPU s':>16} |")
    print(f"|{'-' * 28}|{'-' * 18}|{'-' * 18}|{'-' * 18}|{'-' * 18}|")
    print(f"| {'agentrt run (command)':<26} | {_cell([w for w, _ in walls]):>16} | {_cell([c for _, c in walls]):>16} "
          f"| {'':>16} | {'':>16} |")
    for key in now[0]:
        cells = [_cell([p[key][i] for p in runs]) for runs in (now, before) for i in (0, 1)]
        print(f"| {key:<26} | " + " | ".join(f"{c:>16}" for c in cells) + " |")


def _cell(vals: list[float]) -> str:
    return f"{statistics.median(vals):.2f} ({min(vals):.1f}-{max(vals):.1f})"


if __name__ == "__main__":
    main()
