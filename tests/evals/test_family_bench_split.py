"""family_bench's zero-shot router never saw the family it is scored on: neither its suite nor, by default, any
run over its corpus (issue 39: the abstain estimate is corpus-bound, and a user's own documents have no runs)."""

from __future__ import annotations

from types import SimpleNamespace


def _run(suite: str, corpus: str, i: int = 0):
    return SimpleNamespace(key=f"explore|{suite}|{suite}-{i}|0", corpus=corpus)


def test_leaving_a_family_out_takes_every_run_over_its_corpus_with_it(import_bench):
    bench = import_bench("family_bench")
    runs = [_run("hotpotqa-index", "hotpotqa-index-corpus-b1c1", i) for i in range(3)] + [
        _run("easy", "hotpotqa-index-corpus-b1c1"),  # B2: a general question asked over the family's documents
        _run("easy", ""),  # the same suite without an index
        _run("easy", "squad-corpus-2fb2"),  # over another family's documents
        _run("squad", "squad-corpus-2fb2"),
        _run("simpleqa", "?"),  # over an index logged before runs named it: no family's
    ]
    left = bench.left_in(runs, "hotpotqa-index")
    assert [(bench.suite_of(e), e.corpus) for e in left] == [
        ("easy", ""), ("easy", "squad-corpus-2fb2"), ("squad", "squad-corpus-2fb2"), ("simpleqa", "?")]
    # the definition before: only the family's own suite leaves
    kept = bench.left_in(runs, "hotpotqa-index", keep_corpus_runs=True)
    assert len(kept) == 5 and ("easy", "hotpotqa-index-corpus-b1c1") in [(bench.suite_of(e), e.corpus) for e in kept]
    assert [e.corpus for e in bench.left_in(runs, "squad")] == ["hotpotqa-index-corpus-b1c1"] * 4 + ["", "?"]
