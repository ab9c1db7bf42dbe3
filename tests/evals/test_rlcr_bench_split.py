"""The RLCR bench's data discipline (issue 21): train, dev (the watch's, which picks the kept step) and
held-out items never share a question, each kind keeps its share, and a seed gives the same split."""

from __future__ import annotations


def test_train_dev_and_held_out_items_are_disjoint_and_mixed(import_bench):
    bench = import_bench("rlcr_bench")
    train, held, dev = bench.split(4, 200, 80, 32)
    questions = [{row["prompt"][-1]["content"] for row in part} for part in (train, held, dev)]
    assert len(held) == 80 and len(dev) == 32 and 150 < len(train) <= 200
    assert not (questions[0] & questions[1]) and not (questions[0] & questions[2]) and not (questions[1] & questions[2])
    assert all(len(q) == len(p) for q, p in zip(questions, (train, held, dev)))  # no repeats inside a part either
    kinds = {row["data_source"] for row in held}
    assert kinds == {row["data_source"] for row in dev} == {"easy-dev", "arith-1digit-sum", "arith-2digit-sum",
                                                             "arith-2digit-product", "simpleqa", "gsm8k"}
    # Which items are held out does not depend on the dev size: adding a dev split kept earlier held-out items.
    assert {row["prompt"][-1]["content"] for row in bench.split(4, 200, 80, 0)[1]} == questions[1]
    assert bench.split(4, 200, 80, 32) == (train, held, dev)
