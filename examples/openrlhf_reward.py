"""OpenRLHF reward function over agentrt's verifiers (``--remote_rm_url examples/openrlhf_reward.py``).

Data: ``agentrt export --format trl-prompts --out prompts.jsonl`` gives rows ``{prompt, answer,
verifier, ...}``; train with ``--input_key prompt --label_key answer --apply_chat_template``. OpenRLHF
passes the labels (the ``answer`` column) to ``reward_func``; the verifier comes from
``AGENTRT_VERIFIER`` (default ``qa``; ``math`` for gsm8k/math500 rollouts).
"""

from __future__ import annotations

import json
import os
from typing import Any

from agentrt.trajectory.rewards import score

_JSON_TRUTHS = ("qa", "unit_tests", "ifeval")


def reward_func(queries: list[str], prompts: list[str], labels: list[Any], **_: Any) -> Any:
    import torch

    verifier = os.environ.get("AGENTRT_VERIFIER", "qa")
    scores = []
    for query, prompt, label in zip(queries, prompts, labels):
        response = query[len(prompt):] if query.startswith(prompt) else query  # queries = prompt + response
        if verifier in _JSON_TRUTHS and isinstance(label, str) and label[:1] in "[{":
            label = json.loads(label)  # the export writes list/dict ground truths as JSON text
        scores.append(float(score(verifier, response, label).score))
    rewards = torch.tensor(scores, dtype=torch.float32)
    return {"rewards": rewards, "scores": rewards, "extra_logs": {}}
