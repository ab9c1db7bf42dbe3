"""Ship a router `agentrt learn` trained: copy it into ``agentrt/data/routers/NAME.json`` with its provenance.

    .venv/bin/python -m evals.ship_router HOME/routers/r001.json NAME --runs-root DIR [--note TEXT]

The router file keeps its weights, metrics, evidence and provenance as learn wrote them; the provenance gains
``version: shipped:NAME`` and ``trained_as`` (the version learn gave it), the trajectory folders it was trained on
(and the suites that name them) are written relative to ``--runs-root`` (a user's clone has none of them: they name how the data was made), and each
folder's exploration (``../explore/config.json``: suites, limit, budget, seed) with its run count is listed under
``explore``. The registry picks a shipped router for a policy by the fingerprint id in its provenance
(``agentrt.router.registry.resolve_default``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[1] / "agentrt" / "data" / "routers"


def explore_record(folder: Path, root: Path) -> dict:
    """What made one trajectory folder: its exploration config and how many runs it holds."""
    config = folder.parent / "explore" / "config.json"
    record = json.loads(config.read_text(encoding="utf-8")) if config.is_file() else {}
    keep = {k: record[k] for k in ("suites", "limit", "budget", "seed", "samples", "tools") if k in record}
    results = folder.parent / "explore" / "results.jsonl"
    runs = sum(1 for line in results.open(encoding="utf-8") if line.strip()) if results.is_file() else None
    return {"name": _relative(folder.parent, root), **keep, "runs": runs}


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return path.name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("router", help="a router file learn wrote (HOME/routers/rNNN.json)")
    ap.add_argument("name", help="the shipped name (agentrt/data/routers/NAME.json)")
    ap.add_argument("--runs-root", default=".", help="the folder the logged trajectory folders are named relative to")
    ap.add_argument("--note", help="why it ships: how the data was made, what the gate said and what else decided "
                                   "(provenance.shipped_note, what `agentrt router list` shows as its verdict)")
    args = ap.parse_args()
    data = json.loads(Path(args.router).read_text(encoding="utf-8"))
    prov = dict(data.get("provenance") or {})
    if not prov.get("policy"):
        ap.error(f"{args.router} names no policy in its provenance: the registry could not pick it for any")
    root = Path(args.runs_root)
    logged = [Path(p) for p in prov.get("logged", [])]
    prov["explore"] = [explore_record(p, root) for p in logged]
    prov["logged"] = [_relative(p, root) for p in logged]
    prov["suites"] = [_relative(Path(x), root) if Path(x).is_absolute() else x for x in prov.get("suites", [])]
    prov["trained_as"] = prov.get("version", "")
    prov["version"] = f"shipped:{args.name}"
    if args.note:
        prov["shipped_note"] = args.note
    data["provenance"] = prov
    out = SHIPPED / f"{args.name}.json"
    out.write_text(json.dumps(data) + "\n", encoding="utf-8")
    print(f"{out}: {prov['policy'].get('id')} ({len(logged)} trajectory folders)")


if __name__ == "__main__":
    main()
