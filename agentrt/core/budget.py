"""The token budget: a hard bound on what a run may spend.

Every model call reserves before it runs (``reserve`` clips ``max_tokens`` to what is left after the
prompt) and is charged after (``charge`` with the real usage, which frees the rest of the reservation).
``split`` carves child budgets for parallel work; closing a child returns what it did not spend.
All operations take one lock, so the ledger is safe from threads and asyncio tasks alike.

The invariant: ``spent + reserved <= total`` at every moment, in every budget of the tree.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentrt.core.errors import BudgetExceeded, InputError, RunError

if TYPE_CHECKING:
    from agentrt.core.protocols import ModelBackend
    from agentrt.core.types import Completion, GenParams, Message


@dataclass(slots=True)
class Reservation:
    """Tokens held for one call: the prompt plus at most ``max_tokens`` new tokens."""

    budget: Budget
    prompt_tokens: int
    max_tokens: int
    settled: bool = False

    @property
    def amount(self) -> int:
        return self.prompt_tokens + self.max_tokens


class Budget:
    """A token ledger with reserve / charge / split. ``total`` is never exceeded."""

    def __init__(self, total: int, *, name: str = "run", _parent: Budget | None = None) -> None:
        if not isinstance(total, int) or total < 0:
            raise InputError(f"budget must be a non-negative integer, got {total!r}")
        self.total = total
        self.name = name
        self._parent = _parent
        self._spent = 0
        self._reserved = 0
        self._closed = False
        self._lock = threading.Lock()

    # -- reading ---------------------------------------------------------------------------
    @property
    def spent(self) -> int:
        return self._spent

    @property
    def reserved(self) -> int:
        return self._reserved

    @property
    def remaining(self) -> int:
        """Tokens neither spent nor held by a reservation or an open child."""
        with self._lock:
            return self.total - self._spent - self._reserved

    def __repr__(self) -> str:
        return f"Budget({self.name}: spent={self._spent} reserved={self._reserved} total={self.total})"

    # -- calls -----------------------------------------------------------------------------
    def reserve(self, prompt_tokens: int, max_tokens: int, *, min_tokens: int = 1) -> Reservation:
        """Hold tokens for a call. ``max_tokens`` is clipped to what remains after the prompt.

        Raises ``BudgetExceeded`` when fewer than ``min_tokens`` new tokens would fit.
        """
        if prompt_tokens < 0 or max_tokens < 0:
            raise InputError("prompt_tokens and max_tokens must be >= 0")
        with self._lock:
            self._check_open()
            free = self.total - self._spent - self._reserved
            grant = min(max_tokens, free - prompt_tokens)
            if grant < min_tokens or grant < 0:
                raise BudgetExceeded(
                    f"budget '{self.name}' has {free} tokens left; the next call needs "
                    f"{prompt_tokens} prompt + {min_tokens} new tokens"
                )
            self._reserved += prompt_tokens + grant
            return Reservation(self, prompt_tokens, grant)

    def charge(self, reservation: Reservation, prompt_tokens: int, completion_tokens: int) -> None:
        """Settle a reservation with the real usage; the unused part returns to the budget."""
        with self._lock:
            if reservation.budget is not self or reservation.settled:
                raise RunError("reservation already settled or from another budget")
            reservation.settled = True
            self._reserved -= reservation.amount
            used = prompt_tokens + completion_tokens
            if used > reservation.amount:
                # A backend returned more than it was allowed. Record the truth, then fail loudly:
                # the caller must not get a silent overspend.
                self._spent += used
                raise RunError(
                    f"backend used {used} tokens but only {reservation.amount} were reserved; "
                    "its tokenizer or max_tokens handling disagrees with the budget"
                )
            self._spent += used

    def release(self, reservation: Reservation) -> None:
        """Give back a reservation whose call never happened (or failed before producing tokens)."""
        with self._lock:
            if not reservation.settled:
                reservation.settled = True
                self._reserved -= reservation.amount

    # -- children --------------------------------------------------------------------------
    def child(self, amount: int, *, name: str = "child") -> Budget:
        """Carve ``amount`` tokens (clipped to what remains) into a child budget."""
        if amount < 0:
            raise InputError("a child budget must be >= 0 tokens")
        with self._lock:
            self._check_open()
            grant = max(0, min(amount, self.total - self._spent - self._reserved))
            self._reserved += grant
        return Budget(grant, name=name, _parent=self)

    def split(self, amounts: list[int], *, name: str = "child") -> list[Budget]:
        """Carve several children at once; each is clipped in order to what remains."""
        return [self.child(a, name=f"{name}[{i}]") for i, a in enumerate(amounts)]

    def close(self) -> None:
        """Close a child: its spending moves to the parent, its unspent tokens return there.

        Tokens still held by open reservations or children count as spent (they may yet be used),
        so closing early can never let the tree overspend. Closing twice is a no-op.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            spent, total = self._spent + self._reserved, self.total
        parent = self._parent
        if parent is None:
            return
        with parent._lock:
            parent._reserved -= total
            parent._spent += spent

    def __enter__(self) -> Budget:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RunError(f"budget '{self.name}' is closed")


async def chat_within(budget: Budget, backend: ModelBackend, messages: list[Message], params: GenParams, *,
                      min_tokens: int = 1, prepare: Callable[[GenParams, int], GenParams] | None = None,
                      ) -> tuple[Completion, GenParams]:
    """The one budgeted model call: count the prompt, reserve, call, charge the real usage.

    ``max_tokens`` is clipped to what the budget can pay (split over ``params.n`` choices);
    ``prepare(params, prompt_tokens)`` may adjust the clipped params just before the call. The
    reservation is released when the call fails. Raises ``BudgetExceeded`` when not even
    ``min_tokens`` new tokens per choice fit. Returns the completion and the params it ran with.
    """
    prompt_tokens = backend.count_tokens(messages, params)
    n = max(1, params.n)
    reservation = budget.reserve(prompt_tokens, params.max_tokens * n, min_tokens=min_tokens * n)
    params = dataclasses.replace(params, max_tokens=reservation.max_tokens // n)
    try:
        if prepare is not None:
            params = prepare(params, prompt_tokens)
        completion = await backend.chat(messages, params)
    except BaseException:
        budget.release(reservation)
        raise
    budget.charge(reservation, completion.usage.prompt_tokens, completion.usage.completion_tokens)
    return completion, params
