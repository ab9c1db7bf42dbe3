"""``agentrt router list | show | promote | rollback``: the learned routers under $AGENTRT_HOME/routers.

The router in use for a policy (the default spec ``auto``) is the last one promoted for its fingerprint,
else the one shipped with agentrt, else the rules.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("router", help="the router registry: list, show, promote, rollback")
    rs = p.add_subparsers(dest="router_command", metavar="ACTION", parser_class=type(p))
    ls = rs.add_parser("list", help="every router version, which one each policy uses")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=cmd_list)
    sh = rs.add_parser("show", help="a router's provenance and held-out figures")
    sh.add_argument("version", nargs="?", help="r001, shipped:NAME (default: the one in use for --policy)")
    sh.add_argument("--policy", help="policy backend spec (default: the configured one)")
    sh.set_defaults(func=cmd_show)
    pr = rs.add_parser("promote", help="make a version the default router for the policy it was trained for")
    pr.add_argument("version", help="the version to promote: r001, ... (see `agentrt router list`)")
    pr.set_defaults(func=cmd_promote)
    rb = rs.add_parser("rollback", help="undo the last promotion for a policy")
    rb.add_argument("--policy", help="policy backend spec (default: the configured one)")
    rb.set_defaults(func=cmd_rollback)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _context(args: argparse.Namespace) -> tuple[Path, Any]:
    from agentrt.core.config import load_settings
    from agentrt.router.registry import settings_fingerprint

    settings = load_settings(args.config, policy=getattr(args, "policy", None))
    return Path(settings.home), settings_fingerprint(settings)


def cmd_list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from agentrt.router import registry

    home, fp = _context(args)
    in_use = registry.resolve_default(home, fp)
    state = registry.history(home)
    current = {vs[-1] for vs in state.values() if vs}
    # observe mode: the candidate deciding in shadow, and the verdicts of those already judged on traffic
    observed = {r.get("version"): r for r in registry.observe_state(home).values()}
    rows = []
    for e in registry.entries(home):
        h = e.provenance.get("heldout") or {}
        status = ("in use" if in_use and e.version == in_use.version else
                  "promoted" if e.version in current else "shipped" if e.shipped else
                  "previously promoted" if any(e.version in vs for vs in state.values()) else "candidate")
        watch = observed.get(e.version) or {}
        if watch.get("status") == "observing":
            status = "observing (shadow)"
        elif watch.get("status") == "refused" and status == "candidate":
            status = "refused on traffic"
        rows.append({"version": e.version, "status": status, "policy": e.fingerprint_id or "-",
                     "date": e.provenance.get("date", "-"), "runs": (e.provenance.get("runs") or {}).get("total"),
                     "value": h.get("value"), "ece": h.get("ece"),
                     # a shipped file says why it ships (its learn verdict was in another home, on another incumbent)
                     "verdict": e.provenance.get("shipped_note") or
                                "; ".join((e.provenance.get("verdict") or {}).get("reasons") or []) or
                                ("promote" if (e.provenance.get("verdict") or {}).get("promote") else "-"),
                     "observe": watch or None})
    if args.json:
        watched = registry.observing(home, fp.id)
        print(json.dumps({"policy": fp.id, "in_use": in_use.version if in_use else "rules",
                          "observing": watched.version if watched else None, "routers": rows}))
        return 0
    table = Table(title=f"routers (policy {fp.id}: {in_use.version if in_use else 'rules'} in use)")
    for col in ("version", "status", "policy", "date", "runs", "held-out value", "ECE", "learn's verdict"):
        table.add_column(col)
    for r in rows:
        verdict = r["verdict"]
        if r["observe"] and r["observe"].get("verdict"):  # judged on traffic, in shadow: that verdict counts
            v = r["observe"]["verdict"]
            verdict = (f"traffic ({r['observe'].get('observed')} runs{', look ' + str(v['look']) if v.get('look') else ''}"
                       f"): difference {v['difference']:+.4f} [{v['interval'][0]:+.4f}, {v['interval'][1]:+.4f}]; "
                       + ("undecided, observing on" if v.get("undecided") else "; ".join(v["reasons"]) or "promote"))
        table.add_row(r["version"], r["status"], r["policy"], str(r["date"]), str(r["runs"] or "-"),
                      "-" if r["value"] is None else f"{r['value']:+.4f}", "-" if r["ece"] is None else f"{r['ece']:.4f}",
                      verdict[:100])
    Console(width=max(150, Console().width)).print(table)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from agentrt.router import registry

    home, fp = _context(args)
    entry = registry.find(home, args.version) if args.version else registry.resolve_default(home, fp)
    if entry is None:
        print(f"no learned router for policy {fp.id}: the rules decide (train one with `agentrt learn`)")
        return 0
    observe = next((r for r in registry.observe_state(home).values() if r.get("version") == entry.version), None)
    try:  # out-of-fold calibration apart for the runs with and without evidence (files since issue 39)
        data = json.loads(entry.path.read_text())
    except (OSError, ValueError):
        data = {}
    provenance = dict(entry.provenance)
    if isinstance(provenance.get("fit_on"), list):  # digests of its training questions (learn's gate): their count
        provenance["fit_on"] = f"{len(provenance['fit_on'])} question digests (the questions it was fit on)"
    print(json.dumps({"version": entry.version, "file": str(entry.path), "provenance": provenance,
                      "observe": observe, "by_evidence": (data.get("metrics") or {}).get("by_evidence"),
                      "corpora": _corpora(data)}, indent=1))
    return 0


def _corpora(data: dict) -> dict[str, dict[str, int]] | None:
    """Per corpus-bound action (abstain), about how many training runs were over each corpus ("" no index, "?" not
    named): the corpora where its estimate can be calibrated (agentrt.router.evidence); None for a file without."""
    from agentrt.router.evidence import CORPUS_BOUND

    out = {}
    for action, sample in ((data.get("evidence") or {}).get("actions") or {}).items():
        tags = sample.get("corpora") if action in CORPUS_BOUND else None
        if tags:
            per_row = int(sample.get("runs", len(tags))) / len(tags)
            out[action] = {t: round(per_row * tags.count(t)) for t in sorted(set(tags))}
    return out or None


def cmd_promote(args: argparse.Namespace) -> int:
    from agentrt.router import registry

    home, _ = _context(args)
    entry = registry.promote(home, args.version)
    print(f"promoted {entry.version}: the default router for policy {entry.fingerprint_id}")
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    from agentrt.router import registry

    home, fp = _context(args)
    now = registry.rollback(home, fp.id)
    fallback = registry.resolve_default(home, fp)
    print(f"rolled back: policy {fp.id} now uses {now.version if now else (fallback.version if fallback else 'rules')}")
    return 0
