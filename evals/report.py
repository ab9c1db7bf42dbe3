"""Eval reports: ``report.json`` (every number), ``report.md`` (summary tables), ``pareto.png``
(accuracy vs tokens per policy) and ``reliability.png`` (router calibration). matplotlib (Agg) is in
the ``evals`` extra and imported only here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentrt.core.errors import missing_extra


def write_reports(out: Path, metrics: dict[str, Any], meta: dict[str, Any]) -> dict[str, Path]:
    """Write the four report files into ``out``; returns their paths by kind."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "report.json", "markdown": out / "report.md", "pareto": out / "pareto.png",
             "reliability": out / "reliability.png"}
    _atomic(paths["json"], json.dumps({"meta": meta, **metrics}, indent=1, default=str))
    _atomic(paths["markdown"], markdown(metrics, meta))
    plot_pareto(metrics, paths["pareto"])
    plot_reliability(metrics, paths["reliability"])
    return paths


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _f(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


TOOLS_LABEL = {"safe": "safe defaults (calculator, index search)", "builtin": "on (built-in)", True: "on (built-in)"}


def markdown(metrics: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = [f"# agentrt eval: {', '.join(meta.get('suites', []))}", "",
             f"policy model `{meta.get('policy')}`, budget {meta.get('budget')} tokens, samples {meta.get('samples')}, "
             f"seed {meta.get('seed')}, tools {TOOLS_LABEL.get(meta.get('tools'), 'off')}, {metrics['runs']} runs, "
             f"{meta.get('wall_s', 0):.1f} s.", ""]
    if meta.get("notes"):
        lines += [f"> {n}" for n in meta["notes"]] + [""]
    policies = metrics["policies"]
    suites = sorted({s for p in policies.values() for s in p if s != "all"})
    for suite in suites:
        lines += [f"## {suite}", "",
                  "| policy | items | accuracy | no answer | pass@k | pass^k | tokens (prompt/compl/think) | tool calls | p50 / p95 s | action mix | ECE | abstain P/R |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, per_suite in policies.items():
            m = per_suite.get(suite)
            if not m:
                continue
            ks = sorted((k for k in m if k.startswith("pass@")), key=lambda k: int(k[5:]))
            top = ks[-1] if ks else None
            pk = f"{top}={_f(m[top])}" if top else "-"
            phk = f"pass^{top[5:]}={_f(m['pass^' + top[5:]])}" if top else "-"
            mix = ", ".join(f"{a} {v:.0%}" for a, v in m["action_mix"].items())
            cal = m.get("calibration", {}).get("ece")
            ab = m.get("abstention")
            abs_txt = f"{_f(ab['precision'], 2)} / {_f(ab['recall'], 2)}" if ab else "-"
            lines.append(f"| {name} | {m['items']} | {_f(m['accuracy'])} | {_f(m.get('no_answer'))} | {pk} | {phk} | "
                         f"{_f(m['prompt_tokens'], 0)} / {_f(m['completion_tokens'], 0)} / {_f(m['thinking_tokens'], 0)} | "
                         f"{_f(m['tool_calls'], 1)} | {_f(m['latency_p50_s'], 2)} / {_f(m['latency_p95_s'], 2)} | {mix} | "
                         f"{_f(cal)} | {abs_txt} |")
        lines += ["", "Per action (route taken):", "", "| policy | action | runs | accuracy | mean tokens |", "|---|---|---|---|---|"]
        for name, per_suite in policies.items():
            for action, a in per_suite.get(suite, {}).get("per_action", {}).items():
                lines.append(f"| {name} | {action} | {a['runs']} | {_f(a['accuracy'])} | {_f(a['total_tokens'], 0)} |")
        lines.append("")
        turn_rows = [(name, per_suite[suite]["per_turn"]) for name, per_suite in policies.items()
                     if "per_turn" in per_suite.get(suite, {})]
        if turn_rows:
            cols = sorted({k for _, t in turn_rows for k in t if k.startswith("turn ")}, key=lambda k: int(k[5:]))
            lines += ["Per turn (multi-turn items; accuracy / mean score; the item's score is its last turn's):", "",
                      "| policy | items | " + " | ".join(cols) + " | plan check | plan with dependent steps |",
                      "|---|---|" + "---|" * (len(cols) + 2)]

            def cell(t: dict[str, Any], key: str) -> str:
                return f"{_f(t.get(key))} / {_f(t.get('mean_score', {}).get(key))}" if key in t else "-"

            for name, t in turn_rows:
                lines.append(f"| {name} | {t['items']} | " + " | ".join(cell(t, c) for c in cols)
                             + f" | {cell(t, 'plan')} | {_f(t.get('plan_dependent'))} |")
            lines.append("")
    cal_rows = [(n, s, m["calibration"]) for n, p in policies.items() for s, m in p.items() if s != "all" and "calibration" in m]
    if cal_rows:
        lines += ["## Calibration", "", "| policy | suite | n | ECE | Brier |", "|---|---|---|---|---|"]
        lines += [f"| {n} | {s} | {c['n']} | {_f(c['ece'])} | {_f(c['brier'])} |" for n, s, c in cal_rows]
        lines.append("")
    else:
        lines += ["No router reported success probabilities: no calibration numbers.", ""]
    lines += ["no answer: the share of runs that ended without a real answer (status no_answer, or truncated with "
              "none): counted wrong, never as abstentions.", ""]
    lines += ["Files: report.json (every number), results.jsonl (one line a run), pareto.png, reliability.png.", ""]
    return "\n".join(lines)


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise missing_extra("matplotlib", "evals") from None
    matplotlib.use("Agg")  # files only: no display on servers and CI
    import matplotlib.pyplot as plt

    return plt


def plot_pareto(metrics: dict[str, Any], path: Path) -> None:
    """Accuracy vs mean tokens per run, one point per policy (over all suites), frontier drawn."""
    plt = _pyplot()
    points = [(name, p["all"]["total_tokens"] or 0.0, p["all"]["accuracy"] or 0.0)
              for name, p in metrics["policies"].items() if "all" in p]
    fig, ax = plt.subplots(figsize=(6, 4.5), dpi=100)
    for name, x, y in points:
        ax.scatter([x], [y], s=50, marker="*" if name == "oracle" else "o")
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    frontier, best = [], -1.0
    for name, x, y in sorted(points, key=lambda p: (p[1], -p[2])):
        if y > best:
            frontier.append((x, y))
            best = y
    if len(frontier) > 1:
        ax.plot([x for x, _ in frontier], [y for _, y in frontier], "--", color="gray", linewidth=1)
    ax.set_xlabel("mean tokens per run (prompt + completion)")
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("accuracy vs tokens")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_reliability(metrics: dict[str, Any], path: Path) -> None:
    """Predicted success probability vs observed accuracy per bin, for each policy that predicts one."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 5), dpi=100)
    ax.plot([0, 1], [0, 1], ":", color="gray", label="perfect calibration")
    drawn = False
    for name, per_suite in metrics["policies"].items():
        cal = per_suite.get("all", {}).get("calibration")
        if cal:
            rows = cal["reliability"]
            ax.plot([r["confidence"] for r in rows], [r["accuracy"] for r in rows], "o-",
                    label=f"{name} (ECE {cal['ece']:.3f})")
            drawn = True
    if not drawn:
        ax.text(0.5, 0.5, "no router success probabilities\nin this eval", ha="center", va="center", fontsize=10)
    ax.set_xlabel("predicted probability of success")
    ax.set_ylabel("observed accuracy")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title("reliability")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
