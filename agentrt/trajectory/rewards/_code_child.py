"""The sandboxed child of agentrt.trajectory.rewards._code: reads a JSON spec on stdin, limits itself, runs
program + test + check(entry_point), and writes one JSON line with the nonce to the result pipe.

Runs as ``python -I _code_child.py``: imports nothing from agentrt (it must work in a bare interpreter).
"""

import json
import os
import resource
import sys


def main() -> None:
    spec = json.loads(sys.stdin.read())
    fd, nonce = spec.pop("fd"), spec.pop("nonce")
    mb = spec["memory_mb"] * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mb, mb))
    resource.setrlimit(resource.RLIMIT_CPU, (spec["cpu_s"], spec["cpu_s"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    result = os.fdopen(fd, "w")
    counts = {"passed": 0, "total": 0}

    def counted_assert(fn):
        counts["total"] += 1
        try:
            ok = bool(fn())
        except Exception:
            ok = False
        counts["passed"] += ok

    env = {"__name__": "__candidate__", "__agentrt_assert__": counted_assert}
    report = {"nonce": nonce, "state": "done"}
    try:
        exec(compile(spec["program"], "<program>", "exec"), env)
        exec(compile(spec["test"], "<test>", "exec"), env)
        if spec["entry_point"] not in env:
            raise NameError(f"the program does not define {spec['entry_point']!r}")
        env["check"](env[spec["entry_point"]])
    except BaseException as e:  # noqa: BLE001 - anything the candidate raises is a failed run
        if isinstance(e, SystemExit):
            report["state"] = "early_exit"
        else:
            report["state"] = "error"
            report["error"] = f"{type(e).__name__}: {e}"[:300]
    report.update(counts)
    result.write(json.dumps(report) + "\n")
    result.flush()


if __name__ == "__main__":
    main()
