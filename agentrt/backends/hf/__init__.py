"""Transformers backend with a continuous batcher (the embedded CPU default; spec ``hf:embedded``, ``hf:/path``).

Laid out like nano-vllm, along the pipeline:

* ``backend.py``: ``HFBackend``, the ``ModelBackend`` door: chat templates and token counts, ``chat``
  and ``score``, ``from_spec``; it wires the parts below together.
* ``scheduler.py``: the batcher thread: admission within the batch window, late joins, finishing rows and
  answering each request as soon as its own rows are done; a request with ``GenParams.on_token`` gets each
  row's new text after every pass (``detok.py``: incremental detokenizing).
* ``runner.py``: the model, its prompt passes and decode steps, and sampling (grammar masks included).
* ``sequence.py``: ``Request`` / ``Row`` / ``BatcherStats``, what the scheduler and the runner share.
* ``kvcache.py``: the KV cache that grows in place, the running batch's tensors, the prefix cache.
* ``llama.py`` / ``lean_tok.py``: the lean Llama and tokenizer (Llama folders, the embedded model among
  them, load without importing transformers; ``AGENTRT_HF_IMPL=transformers`` forces transformers' classes);
  ``lean_imports.py`` keeps transformers' fallback path from importing scikit-learn and SciPy.
* ``cpu_speed.py``: the CPU kernels (copy-free grouped-query decode attention, transposed linear storage,
  packed large linears). ``grammar.py``: xgrammar matchers.

Importing this package imports torch (``load_backend`` does so only when a spec names ``hf``).
"""

from agentrt.backends.hf.backend import HFBackend, from_spec
from agentrt.backends.hf.sequence import BatcherStats

__all__ = ["BatcherStats", "HFBackend", "from_spec"]
