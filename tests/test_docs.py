"""The docs a user reads stay readable, and what they mark runnable runs (the README's mechanism, test_readme.py).

* docs/*.md (not docs/results/, the dated measurement logs) are each at most MAX_LINES lines and name no issue
  numbers ("issue 39", "#39"); neither does the README.
* Each results log is linked from the user doc of its area, and each of its entries names the commit it was
  measured at and the command that reproduces it.
* A fenced block of a doc preceded by ``<!-- doc-test: run -->`` runs as the README's blocks do (bash, python,
  console; ``set -euo pipefail``; a scratch folder that sees the repo, a temporary HOME): in file order within a
  doc, so a later block may use what an earlier one made. docs/concepts.md is the newcomer's page: every one of
  its bash blocks is marked runnable or carries ``<!-- readme-test: skip REASON -->``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_readme import ROOT, RUN, readme_blocks, run_block, workspace  # noqa: F401  (workspace: a fixture)

DOCS = ROOT / "docs"
RESULTS = DOCS / "results"
MAX_LINES = 320
RUN_MARK = re.compile(r"<!--\s*doc-test:\s*run\s*-->")
# "issue 39", "issues 33, 37", "Issue #12", "#39" (not an HTML entity "&#39;" nor a link anchor "file.md#x")
ISSUE = re.compile(r"\bissues?\s*#?\d+|(?<![\w&/#])#\d+\b", re.IGNORECASE)


def user_docs() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def marked_blocks():
    out = []
    for path in user_docs():
        for b in readme_blocks(path.read_text(encoding="utf-8")):
            if RUN_MARK.search(b.above):
                b.source = f"docs/{path.name}"
                out.append(b)
    return out


MARKED = marked_blocks()


def test_user_docs_are_short_and_name_no_issue_numbers():
    assert len(user_docs()) >= 10
    too_long, issues = [], []
    for path in [*user_docs(), ROOT / "README.md"]:
        lines = path.read_text(encoding="utf-8").splitlines()
        if path.parent == DOCS and len(lines) > MAX_LINES:
            too_long.append(f"{path.name}: {len(lines)} lines")
        issues += [f"{path.name}:{i}: {m.group(0)!r}" for i, line in enumerate(lines, 1) for m in ISSUE.finditer(line)]
    assert not too_long, f"docs over {MAX_LINES} lines (move measurements to docs/results/): {too_long}"
    assert not issues, f"issue numbers in user docs (they belong in docs/results/): {issues}"


def test_the_issue_pattern_finds_what_it_should():
    assert ISSUE.search("as issue 39 asks") and ISSUE.search("(#39)") and ISSUE.search("Issues 33, 37")
    assert not ISSUE.search("it&#39;s") and not ISSUE.search("[x](rlcr.md#the-format)") and not ISSUE.search("r001")


def test_every_results_log_is_linked_and_every_entry_names_its_commit_and_command():
    logs = sorted(RESULTS.glob("*.md"))
    assert {p.stem for p in logs} >= {"routing", "server", "scale", "environments", "rlcr"}
    for log in logs:
        doc = DOCS / f"{log.stem}.md"
        assert f"results/{log.name}" in doc.read_text(encoding="utf-8"), f"{doc.name} does not link {log.name}"
        text = log.read_text(encoding="utf-8")
        entries = re.split(r"^## (?=\d{4}-\d\d-\d\d)", text, flags=re.MULTILINE)[1:]
        assert entries, f"{log.name}: no dated entries"
        dates = [e[:10] for e in entries]
        assert dates == sorted(dates, reverse=True), f"{log.name}: entries not newest first: {dates}"
        for e in entries:
            head = e.split("\n", 1)[0]
            assert re.search(r"\*\*Measured at\*\*: commit `[0-9a-f]{7,40}`", e), f"{log.name} {head}: no commit"
            assert re.search(r"\*\*Command\*\*: .*`", e), f"{log.name} {head}: no command"


def test_the_concepts_page_is_linked_first_and_runs_every_step():
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert any("docs/concepts.md" in line for line in readme[:30]), "README: link docs/concepts.md near the top"
    text = (DOCS / "concepts.md").read_text(encoding="utf-8")
    assert text.count("```mermaid") == 1
    for step in ("Request", "Router", "Route", "Trajectory", "Learn", "Promote"):
        assert re.search(rf"^## \d\. {step}\b", text, re.MULTILINE), f"concepts.md: no step '{step}'"
    blocks = [b for b in readme_blocks(text) if b.lang in RUN]
    unmarked = [b.line for b in blocks if not RUN_MARK.search(b.above) and b.skip is None]
    assert not unmarked, f"concepts.md blocks at lines {unmarked}: mark them runnable or say why they cannot run"
    commands = " ".join(b.code for b in blocks if RUN_MARK.search(b.above))
    for cmd in ("agentrt index", "agentrt run", "agentrt route", "agentrt feedback", "agentrt learn",
                "agentrt router promote", "agentrt router rollback"):
        assert cmd in commands, f"concepts.md runs no `{cmd}`"


def test_marked_blocks_are_runnable_languages():
    assert len(MARKED) >= 6
    assert all(b.lang in RUN for b in MARKED), [f"{b.source}:{b.line} {b.lang}" for b in MARKED if b.lang not in RUN]


@pytest.mark.slow
@pytest.mark.parametrize("block", MARKED, ids=[f"{b.source}:L{b.line}" for b in MARKED])
def test_marked_doc_block_runs(block, workspace):
    work, env = workspace
    run_block(block, work, env)
