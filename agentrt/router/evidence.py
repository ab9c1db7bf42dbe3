"""How much evidence stands behind a learned router's p_success for one question.

A probability without a sample size is a guess: a router fit on math and trivia claims 0.6 on a question
kind it never saw. Per action, the evidence is an *effective sample size*: how many of the training runs
that took the action resemble this question, by a Gaussian kernel over the router's standardized inputs
(the numeric features, standardized as the router standardizes them, and the hashed words)::

    ess(a, x) = (runs(a) / len(sample(a))) * sum_j exp(-|z(x) - z_j|^2 / (2 h^2))

``sample(a)``: up to ``SAMPLE_SIZE`` training inputs of the runs that took ``a``, stored (sparse, raw)
in the router file at training time; ``h``: the bandwidth, the median distance of a training input to
its ``NEIGHBOURS``-th nearest neighbour (so a typical training question has about that many near it), at least
``MIN_BANDWIDTH``.

A file written before evidence existed has no sample: its evidence is estimated from the moments it
does store (the per-feature mean and std of its training inputs): ``runs / actions`` times the share of
training runs holding the question's rarest feature value (``moment_sizes``), method ``moments``. Coarser,
but it still catches a question unlike anything the router was fit on (a feature that never varied in
training, a value far beyond what training saw).

**The abstain estimate is corpus-bound.** Whether a question is unanswerable *from the index* is a property of
the user's documents, not of the question: measured (evals/bench/family_bench.py), a router fit on other corpora
misjudges it on a new one (abstain ECE 0.16-0.26 on the families left out in turn, while the answering actions'
estimates carry over: 0.02-0.05). So for the actions in ``CORPUS_BOUND`` the kernel counts only training runs over
the same corpus as the question (``corpus_key``: the collection's name; "" without an index): over documents the
router was never fit on, abstaining has no evidence until that corpus's own traffic gives some. Where runs over
other corpora resemble the question, their estimate still decides (the best there is; fallback ``other_corpora``),
marked ``insufficient_evidence``; with none, the usual fallback (``shrunk`` toward ``cue_prior``).

States: ``calibrated`` (ess >= the minimum), ``insufficient_evidence`` (below it), ``other_policy``
(the router was trained for another policy than the one running; set by the router, not here).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentrt.router.features import CUES

CALIBRATED = "calibrated"
INSUFFICIENT = "insufficient_evidence"
OTHER_POLICY = "other_policy"
STATES = (CALIBRATED, INSUFFICIENT, OTHER_POLICY)

SAMPLE_SIZE = 150  # training inputs kept per action: enough for a density, small in the file
NEIGHBOURS = 5  # the bandwidth makes a typical training input have about this many neighbours
MIN_BANDWIDTH = 1.0  # at least one standard deviation: near-duplicate training questions must not make it a point
MIN_EVIDENCE = 3.0  # default Settings.router_min_evidence: below it, p_success is not trusted
MOMENTS_Z = 3.0  # moments method: a standardized feature beyond this is outside what training saw
CORPUS_BOUND = ("abstain",)  # their evidence counts only runs over the question's corpus (see above)
# the fallback that decided when a CORPUS_BOUND action has evidence over other corpora only: their estimate
OTHER_CORPORA = "other_corpora"
UNKNOWN_CORPUS = "?"  # a run over an index logged before runs named their corpus: it is evidence for no corpus


def corpus_key(features: dict[str, Any], corpus: str | None) -> str:
    """The corpus a question is asked over, as the evidence names it: the collection's name when the router's
    index features were read from one (``has_index``), else "" (no index: the model's own knowledge)."""
    if not features.get("has_index"):
        return ""
    return corpus or UNKNOWN_CORPUS


@dataclass
class ActionSample:
    """One action's stored evidence: its run count, and a sample of its training inputs (raw, sparse)."""

    runs: int
    rows: list[dict[int, float]]
    # the corpus each row's run was asked over (``corpus_key``), for the CORPUS_BOUND actions; None: not
    # recorded (files written before it), every row counts for every corpus
    corpora: list[str] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"runs": self.runs, "rows": [[[i, v] for i, v in sorted(r.items())] for r in self.rows]}
        if self.corpora is not None:
            out["corpora"] = self.corpora
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ActionSample:
        corpora = data.get("corpora")
        return cls(int(data["runs"]), [{int(i): float(v) for i, v in row} for row in data["rows"]],
                   None if corpora is None else [str(c) for c in corpora])


@dataclass
class Evidence:
    """The stored evidence of a router file: per-action samples and the kernel bandwidth."""

    actions: dict[str, ActionSample]
    bandwidth: float
    # the kernel reads the first ``dims`` inputs (the numeric features: a kind of question, not its words);
    # None: every input, hashed words included (files written before this)
    dims: int | None = None
    _dense: dict[tuple[str, int], Any] = field(default_factory=dict, repr=False)  # standardized samples, cached

    def standardized(self, action: str, mean: list[float], std: list[float]) -> Any:
        """The action's sample as a standardized matrix (built once per input width)."""
        import numpy as np

        key = (action, len(mean))
        if key not in self._dense:
            rows = self.actions[action].rows
            X = np.zeros((len(rows), len(mean)))
            for r, row in enumerate(rows):
                for i, v in row.items():
                    X[r, i] = v
            self._dense[key] = _standardize(X, mean, std)[:, : self.dims]
        return self._dense[key]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"bandwidth": self.bandwidth, "actions": {a: s.to_json() for a, s in self.actions.items()}}
        if self.dims is not None:
            out["dims"] = self.dims
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Evidence | None:
        if not data:
            return None
        dims = data.get("dims")
        return cls({a: ActionSample.from_json(s) for a, s in data["actions"].items()}, float(data["bandwidth"]),
                   None if dims is None else int(dims))


def _sparse(x: list[float]) -> dict[int, float]:
    return {i: round(v, 4) for i, v in enumerate(x) if v != 0.0}


def build(xs: list[list[float]], actions: list[str], mean: list[float], std: list[float], *, seed: int = 0,
          size: int = SAMPLE_SIZE, dims: int | None = None, corpora: list[str] | None = None) -> Evidence:
    """The evidence to store for a router fit on inputs ``xs`` (run i took ``actions[i]``, over corpus
    ``corpora[i]``: ``corpus_key``); the kernel reads their first ``dims`` inputs (None: all)."""
    import random

    import numpy as np

    rng = random.Random(seed)
    by_action: dict[str, list[int]] = {}
    for i, a in enumerate(actions):
        by_action.setdefault(a, []).append(i)
    samples, kept = {}, set()
    for a, idx in sorted(by_action.items()):
        keep = sorted(rng.sample(idx, size)) if len(idx) > size else idx
        tags = [corpora[i] for i in keep] if corpora is not None and a in CORPUS_BOUND else None
        samples[a] = ActionSample(len(idx), [_sparse(xs[i]) for i in keep], tags)
        kept.update(keep)
    # bandwidth: median distance to the NEIGHBOURS-th nearest neighbour among the distinct kept inputs (index 0
    # of a sorted row is the input itself). Distinct: one question logged by several runs (a free abstain run
    # beside the explored one, --samples, --every-action's run per action) is one point, not its own
    # neighbours at distance 0, which would shrink the kernel to its floor and leave every new question
    # without evidence
    kept = sorted(kept)
    Z = np.unique(_standardize(np.asarray([xs[i] for i in kept]), mean, std)[:, :dims], axis=0)
    d2 = (Z ** 2).sum(1)[:, None] + (Z ** 2).sum(1)[None, :] - 2 * Z @ Z.T
    k = min(NEIGHBOURS, len(Z) - 1)
    h = float(np.median(np.sqrt(np.maximum(np.sort(d2, axis=1)[:, k], 0.0)))) if k > 0 else 1.0
    return Evidence(samples, round(max(h, MIN_BANDWIDTH), 4), dims)


def _standardize(X: Any, mean: list[float], std: list[float]) -> Any:
    import numpy as np

    return (X - np.asarray(mean)) / np.asarray(std)


def effective_sizes(evidence: Evidence, x: list[float], mean: list[float], std: list[float],
                    corpus: str | None = None) -> dict[str, float]:
    """ess per action for input ``x`` asked over ``corpus`` (``corpus_key``; None: not known, every row
    counts): the kernel estimate over the stored samples, for a CORPUS_BOUND action over the rows of runs
    over that corpus only."""
    return corpus_sizes(evidence, x, mean, std, corpus)[0]


def corpus_sizes(evidence: Evidence, x: list[float], mean: list[float], std: list[float],
                 corpus: str | None) -> tuple[dict[str, float], dict[str, float]]:
    """ess per action over ``corpus`` (as ``effective_sizes``) and over every corpus, from one kernel pass: the
    first says what is calibrated, the second what the fallback shrinks by (the corpus bound changes the state,
    not the decision)."""
    import numpy as np

    z = _standardize(np.asarray(x, dtype=float), mean, std)[: evidence.dims]
    bound, shared = {}, {}
    for a, s in evidence.actions.items():
        if not s.rows:
            bound[a] = shared[a] = 0.0
            continue
        d2 = ((evidence.standardized(a, mean, std) - z) ** 2).sum(1)
        kernel = np.exp(-d2 / (2 * evidence.bandwidth ** 2))
        scale = s.runs / len(s.rows)
        shared[a] = float(scale * kernel.sum())
        if corpus is not None and s.corpora is not None:
            bound[a] = float(scale * (kernel * np.asarray([c == corpus != UNKNOWN_CORPUS for c in s.corpora])).sum())
        else:
            bound[a] = shared[a]
    return bound, shared


def moment_sizes(x: list[float], mean: list[float], std: list[float], actions: list[str], runs: int,
                 numeric: int) -> dict[str, float]:
    """ess per action for a file without samples: ``runs / actions`` times the share of training runs that
    share the question's rarest feature value.

    A 0/1 feature (its stored std is that of a Bernoulli of its mean) shares its value with ``mean`` or
    ``1 - mean`` of the runs: a rare cue the router did see (yes/no questions, 3% of its runs) still has dozens
    of runs behind it, where a z-score would call it far. Any other feature is discounted beyond MOMENTS_Z
    standard deviations; a feature constant in training (stored mean 0, std 1) that the question sets shares
    its value with no run. The minimum over features, not the product: the features are correlated (a
    comparison is a yes/no question), so a product would count one rarity many times."""
    share = 1.0
    for xi, m, s in zip(x[:numeric], mean, std):
        if xi in (0.0, 1.0) and 0.0 < m < 1.0 and abs(s - math.sqrt(m * (1.0 - m))) < 0.02:
            share = min(share, m if xi == 1.0 else 1.0 - m)
        elif m == 0.0 and s == 1.0 and xi != 0.0:
            share = 0.0
        else:
            share = min(share, math.exp(-0.5 * max(0.0, abs((xi - m) / s) - MOMENTS_Z) ** 2))
    base = runs / max(1, len(actions))
    return {a: base * share for a in actions}


def shrunk(p_success: dict[str, float], sizes: dict[str, float], base_rates: dict[str, float],
           minimum: float) -> dict[str, float]:
    """The fallback's estimates out of evidence: each action's learned p_success pulled toward its success rate
    over all training runs, by how many runs resemble the question::

        p'(a) = (ess(a) * p(a) + k * base(a)) / (ess(a) + k),   k = minimum (router_min_evidence)

    With ample evidence the learned estimate stands; with none the router claims only the action's average —
    what it knows about a question unlike any it was fit on. Actions without a base rate keep their estimate."""
    out = {}
    for a, p in p_success.items():
        if a not in base_rates:
            out[a] = p
            continue
        n = max(0.0, sizes.get(a, 0.0))
        out[a] = (n * p + minimum * base_rates[a]) / (n + minimum) if n + minimum > 0 else base_rates[a]
    return out


# Whether a question is asked over an index is part of its kind for the fallback's prior: an action's rate on runs
# without one (reason on arithmetic) says nothing of a question about documents (measured: the overall rates sent
# document questions with no cue to `reason`, right on none of them there, over `read`)
OVER_INDEX, NO_INDEX = "over_index", "no_index"


def index_stratum(features: dict[str, Any]) -> str:
    """``OVER_INDEX`` when the question's index features were read from an index, else ``NO_INDEX``."""
    return OVER_INDEX if features.get("has_index") else NO_INDEX


def cue_counts(rows: list[tuple[dict[str, float], str, float]],
               keys: Callable[[dict[str, float]], list[str]] | None = None) -> dict[str, dict[str, list[float]]]:
    """Per cue (``features.CUES``; or per key ``keys(features)`` names, e.g. ``index_stratum``), per action:
    [successes, runs] over the training runs ``rows`` ((features, action, success)) with the cue set; cues no run
    had are left out. Out of evidence, the fallback's prior for an action is its rate on the runs of the
    question's rarest cue (``cue_prior``): "Who will win the lottery tomorrow?" is unlike every training question
    by its words, but abstaining was right on 25 of the 26 `unknowable` training runs."""
    keys = keys or (lambda features: [cue for cue in CUES if features.get(cue)])
    out: dict[str, dict[str, list[float]]] = {}
    for features, action, success in rows:
        for key in keys(features):
            cell = out.setdefault(key, {}).setdefault(action, [0.0, 0.0])
            cell[0] += success
            cell[1] += 1
    return {c: {a: [round(s, 4), n] for a, (s, n) in cells.items()} for c, cells in out.items()}


def _toward(counts: dict[str, list[float]], base: dict[str, float], minimum: float) -> dict[str, float]:
    """Per action, the rate ``counts`` ([successes, runs]) shrunk toward ``base`` by its run count."""
    out = {}
    for a, b in base.items():
        s, n = counts.get(a, (0.0, 0.0))
        out[a] = (s + minimum * b) / (n + minimum)
    return out


def cue_prior(features: dict[str, float], counts: dict[str, dict[str, list[float]]], base_rates: dict[str, float],
              minimum: float, strata: dict[str, dict[str, list[float]]] | None = None) -> tuple[dict[str, float], str]:
    """Per action, the prior the fallback shrinks toward, and what it came from: the success rate of the training
    runs sharing the question's rarest cue (the one fewest runs had; its name), itself shrunk toward the rate of
    the runs asked, as this question is, over an index or without one (``strata``: ``index_stratum`` counts; the
    stratum's name when the question has no cue), itself shrunk toward the overall rate, each by its run count,
    ``(s + k * base) / (n + k)`` with ``k = minimum``. Without strata (a file written before them) the cue shrinks
    toward the overall rates, and a question without a cue gets them ("")."""
    stratum = index_stratum(features)
    layer = (strata or {}).get(stratum)
    base = _toward(layer, base_rates, minimum) if layer else dict(base_rates)
    held = [c for c in CUES if c in counts and features.get(c)]
    if not held:
        return base, stratum if layer else ""
    cue = min(held, key=lambda c: sum(n for _, n in counts[c].values()))
    return _toward(counts[cue], base, minimum), cue


def prior_source(label: str) -> str:
    """What a prior rests on (``cue_prior``'s label), as a decision's reason says it."""
    if label in CUES:
        return f"rate on the '{label}' training runs"
    return "training rate" + {OVER_INDEX: " over an index", NO_INDEX: " without an index"}.get(label, "")


def states(sizes: dict[str, float], minimum: float) -> dict[str, str]:
    """The state per action: calibrated when its ess reaches ``minimum``."""
    return {a: CALIBRATED if n >= minimum else INSUFFICIENT for a, n in sizes.items()}
