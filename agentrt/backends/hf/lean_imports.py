"""Imported by the hf backend before transformers' model classes (the fallback path of ``runner.py``;
the lean Llama of ``llama.py`` imports no transformers at all): keeps transformers from importing
scikit-learn and SciPy.

Two transformers modules every causal LM load imports pull in optional libraries whenever they are
installed (they are, for ``agentrt[evals]`` and ``agentrt[train]``), for features agentrt never uses:

* ``generation.candidate_generator`` imports ``sklearn.metrics`` (assisted decoding's dynamic threshold);
* ``loss.loss_utils`` -> the object-detection losses import ``scipy.optimize`` (Hungarian matching).

Together ~1.5-2 s of every ``agentrt run`` on the embedded model (``evals/bench/startup_bench.py``). So
each module is imported once with its library hidden (``sys.modules[name] = None``: ``find_spec``
answers None, transformers' own availability check says no and skips the import); the library is
visible again right after, for anyone who imports it.
"""

from __future__ import annotations

import importlib
import sys

# transformers modules that would import an optional library for nothing we use (the first imports the
# second on the way, so both libraries are hidden for both)
_MODULES = ("transformers.generation.candidate_generator", "transformers.loss.loss_utils")
_HIDDEN = ("sklearn", "scipy")


def import_without(modules: tuple[str, ...], hidden: tuple[str, ...]) -> None:
    """Import ``modules`` while the top-level packages ``hidden`` look absent; a no-op when one of them is
    already imported, or the modules cannot be imported (no transformers: the backend reports it)."""
    if any(m in sys.modules for m in modules) or any(h in sys.modules for h in hidden):
        return
    for h in hidden:
        sys.modules[h] = None  # type: ignore[assignment]
    try:
        for m in modules:
            importlib.import_module(m)
    except ImportError:
        pass
    finally:
        for h in hidden:
            if h in sys.modules and sys.modules[h] is None:
                del sys.modules[h]


import_without(_MODULES, _HIDDEN)
