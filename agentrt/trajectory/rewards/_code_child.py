"""The harness of agentrt.trajectory.rewards._code, run as the code of the python sandbox (``tools.python``):
the parent appends ``main(SPEC)`` (a JSON string: program, test, entry point, nonce) to this file's text.

It runs program + test + check(entry_point) with every ``assert`` of ``check`` counted, and writes one JSON
line with the nonce to a private copy of the sandbox's stdout; the candidate's own stdout and stderr go to
/dev/null, so nothing it prints can stand in for the report. Stdlib only (it runs in a bare interpreter).
"""

import json
import linecache
import os


def main(raw):
    linecache.cache.pop("<python-tool>", None)  # the sandbox keeps the source for tracebacks: it holds the nonce
    spec = json.loads(raw)
    nonce = spec.pop("nonce")
    report_fd = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
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
    os.write(report_fd, (json.dumps(report) + "\n").encode())
