"""The budget is a hard bound: reserve/charge/split never let spending pass the total."""

import asyncio
import random
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.core.budget import Budget
from agentrt.core.errors import BudgetExceeded, InputError, RunError


def test_reserve_clips_to_what_remains_after_the_prompt():
    b = Budget(100)
    r = b.reserve(prompt_tokens=30, max_tokens=500)
    assert r.max_tokens == 70
    assert b.remaining == 0
    b.charge(r, 30, 20)
    assert (b.spent, b.remaining) == (50, 50)


def test_reserve_raises_when_not_even_min_tokens_fit():
    b = Budget(40)
    with pytest.raises(BudgetExceeded, match="40 tokens left"):
        b.reserve(prompt_tokens=40, max_tokens=10)
    assert b.remaining == 40  # a refused reservation holds nothing


def test_charge_above_reservation_is_an_error_not_a_silent_overspend():
    b = Budget(100)
    r = b.reserve(10, 5)
    with pytest.raises(RunError, match="reserved"):
        b.charge(r, 10, 50)


def test_children_return_what_they_do_not_spend():
    b = Budget(100)
    a, c = b.split([60, 60])
    assert (a.total, c.total) == (60, 40)  # the second is clipped to what remained
    r = a.reserve(5, 10)
    a.charge(r, 5, 5)
    a.close()
    c.close()
    assert (b.spent, b.remaining) == (10, 90)


def test_closing_a_child_with_open_reservations_counts_them_as_spent():
    b = Budget(100)
    child = b.child(50)
    child.reserve(10, 30)
    child.close()
    assert b.spent == 40 and b.remaining == 60


def test_invalid_budgets():
    with pytest.raises(InputError):
        Budget(-1)
    with pytest.raises(InputError):
        Budget(10).child(-5)


# -- property: random reserve/charge/split sequences, run concurrently, never overspend --------

op = st.tuples(
    st.sampled_from(["call", "split"]),
    st.integers(0, 60),   # prompt tokens / child size
    st.integers(0, 80),   # max tokens
    st.floats(0, 1.5),    # fraction of the grant the "model" really uses (>1 is clamped: a backend obeys max_tokens)
)


def _worker(budget: Budget, ops, rng: random.Random, depth: int = 0) -> None:
    for kind, a, m, frac in ops:
        if kind == "split" and depth < 3:
            with budget.child(a * 3, name=f"d{depth}") as child:
                _worker(child, ops[: len(ops) // 2], rng, depth + 1)
            continue
        try:
            r = budget.reserve(a, m)
        except BudgetExceeded:
            continue
        used = min(r.max_tokens, int(r.max_tokens * frac))
        if rng.random() < 0.1:
            budget.release(r)  # a failed call
        else:
            budget.charge(r, a, used)
        assert budget.spent + budget.reserved <= budget.total


@settings(max_examples=60, deadline=None)
@given(total=st.integers(0, 2000), ops=st.lists(op, max_size=25), seed=st.integers(0, 10**6))
def test_threads_never_overspend(total, ops, seed):
    root = Budget(total)
    threads = [threading.Thread(target=_worker, args=(root, ops, random.Random(seed + i))) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert root.reserved == 0
    assert 0 <= root.spent <= total


@settings(max_examples=40, deadline=None)
@given(total=st.integers(0, 2000), ops=st.lists(op, max_size=20))
def test_asyncio_tasks_never_overspend(total, ops):
    root = Budget(total)

    async def task(i: int) -> None:
        children = root.split([total // 4])
        for kind, a, m, frac in ops:
            await asyncio.sleep(0)
            target = children[0] if kind == "split" else root
            try:
                r = target.reserve(a, m)
            except BudgetExceeded:
                continue
            await asyncio.sleep(0)  # another task runs between reserve and charge
            target.charge(r, a, int(r.max_tokens * min(frac, 1.0)))
        for c in children:
            c.close()

    async def main() -> None:
        await asyncio.gather(*(task(i) for i in range(6)))

    asyncio.run(main())
    assert root.reserved == 0
    assert 0 <= root.spent <= total
