"""Model tiers in the decision: the actions a tiered policy offers, a tier's prior, and each action's price.

A policy may have tiers beside its base model (``Settings.tiers``: ``{"large": "hf:embedded:qwen2.5-coder-0.5b"}``).
Each answering route (``TIER_ROUTES``) then runs on any tier: the action ``read@large`` is the read route on the
large tier, and a bare ``read`` runs on the base tier. The router compares them in one cost unit
(``Settings.cost_unit``):

* ``seconds`` (the default): an action costs its expected tokens x its tier's seconds per token, measured from the
  runs of this home (``speeds.json``, an average over every model call the tier made: the call's seconds over its
  generated tokens plus ``PROMPT_WEIGHT`` x its prompt tokens) once every tier has run here, and until then from the
  bytes of weights each tier streams a token (``prior_seconds_per_token``).
  The budget is priced at the slowest tier's speed, so a policy with one tier prices exactly as ``tokens`` does.
* ``tokens``: every tier's token costs the same.

The utility's cost term is then ``lambda x price(a) x expected_tokens(a) / budget`` with ``price(a)`` in (0, 1]:
the action's seconds per token over the slowest tier's. The token budget stays the hard bound, tier or not.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from agentrt.core.config import AUTO_INT8_BYTES, Settings
from agentrt.core.files import read_text_capped
from agentrt.core.types import BASE_TIER, TIER_ROUTES, split_action, tier_action

# How much more often a larger tier succeeds than the base, as a share of what the base misses: a hand-set prior
# for the rules router (measured: reading 20 answerable questions from the same passages, SmolLM2-135M 5/20 right,
# Qwen2.5-Coder-0.5B 10/20, i.e. a third of the base's misses). A learned router for the tiered policy replaces it.
TIER_UPLIFT = 0.3
SPEEDS = "speeds.json"  # in the home: {tier spec: {"s_per_token", "runs"}}
# A prompt token costs about a tenth of a generated one on a CPU (Qwen2.5-0.5B int8: prefill 250, decode 22 tokens/s;
# fp32 121 and 8.6): a tier's speed is measured per generated-token equivalent (completion + PROMPT_WEIGHT x prompt),
# so a tier measured on prompt-heavy reads is not taken for faster than one measured on long generations.
PROMPT_WEIGHT = 0.1
_WEIGHT = 0.2  # of each new run in a tier's average: a few runs move it, one slow run does not
# Before a tier is measured: a CPU token is memory-bound, so its seconds go with the bytes of weights it streams,
# ~0.08 s a token per GB (SmolLM2-135M, 0.6 GB of fp32: measured 0.04-0.06 s); a GGUF dequantizes to ~6x its bytes
# of fp32, and the lean runner streams a quarter of those where it loads int8 (AUTO_INT8_BYTES). Measured beside it
# (2026-12-06, docs/results/routing.md): Qwen2.5-Coder-1.5B int8 2.6x SmolLM2's seconds a token; this prior says 2.8x
# (the GGUFs' sizes alone said 11.4x).
_PRIOR_S_PER_TOKEN_PER_GB = 0.08
_FP32_PER_GGUF_BYTE = 6
_MAX_SPEEDS_BYTES = 1 << 20
_lock = threading.Lock()


def tier_specs(settings: Settings) -> dict[str, str]:
    """``{tier: backend spec}``, the base tier (the policy) first."""
    return {BASE_TIER: settings.policy, **settings.tiers}


def tiered_actions(actions: tuple[str, ...], settings: Settings) -> tuple[str, ...]:
    """``actions`` and, for each tier of ``settings``, its answering routes among them (``read@large``)."""
    base = tuple(a for a in actions if "@" not in a)
    extra = [tier_action(r, t) for t in settings.tiers for r in TIER_ROUTES if r in base]
    return tuple(dict.fromkeys([*actions, *extra]))


def with_tier_priors(p: dict[str, float], tokens: dict[str, float], actions: tuple[str, ...],
                     uplift: float = TIER_UPLIFT) -> None:
    """Give each tier action of ``actions`` missing from ``p`` a prior (in place): the base route's p_success
    lifted by ``uplift`` of what it misses (the rules' ``TIER_UPLIFT``; 0 keeps the base estimate), at the base
    route's expected tokens."""
    for a in actions:
        route, tier = split_action(a)
        if tier != BASE_TIER and a not in p and route in p:
            p[a] = min(0.99, p[route] + uplift * (1.0 - p[route]))
            tokens[a] = tokens[route]


# ---- each tier's seconds per token ---------------------------------------------------------------------------


def prior_seconds_per_token(spec: str, models_dir: Path | None = None, weights: str = "auto") -> float | None:
    """A tier's seconds per token before it is measured: in proportion to the bytes of weights a token streams (its
    fp32 weights, from an embedded model's GGUF, a local folder's weight files or a GGUF file; a quarter of them
    where ``hf:`` loads int8, ``weights`` being the setting ``hf_weights``); None for a served model (nothing to
    measure it by)."""
    fp32 = _fp32_bytes(spec, models_dir)
    if not fp32:
        return None
    int8 = spec.strip().startswith("hf:") and (weights == "int8" or (weights == "auto" and fp32 >= AUTO_INT8_BYTES))
    return _PRIOR_S_PER_TOKEN_PER_GB * (fp32 / 4 if int8 else fp32) / 1e9


def _fp32_bytes(spec: str, models_dir: Path | None) -> int:
    kind, _, arg = spec.strip().partition(":")
    if kind not in ("hf", "vllm"):
        return 0
    from agentrt.backends.embedded import embedded_model

    target = arg.partition("?")[0]
    try:
        model = embedded_model(target)
    except Exception:  # an unknown embedded name: no prior
        model = None
    if model is not None:
        return model.size * _FP32_PER_GGUF_BYTE
    path = Path(target).expanduser()
    if path.is_file():
        return path.stat().st_size * _FP32_PER_GGUF_BYTE
    if path.is_dir():  # a Hugging Face folder: its weight files (fp32 as converted here; bf16 ones count as they are)
        return sum(f.stat().st_size for f in path.iterdir() if f.suffix in (".safetensors", ".bin"))
    return 0


def measured(home: Path) -> dict[str, dict[str, float]]:
    """``{spec: {"s_per_token", "runs"}}`` as measured in ``home`` ({} when nothing is, or the file is unreadable)."""
    path = Path(home) / SPEEDS
    try:
        data = json.loads(read_text_capped(path, _MAX_SPEEDS_BYTES, "speeds file"))
    except (OSError, ValueError):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def record_speed(home: Path, spec: str, seconds: float, tokens: float) -> None:
    """Fold one run's model calls on a tier (``tokens`` generated-token equivalents in ``seconds``) into that tier's
    average in ``home``."""
    if tokens <= 0 or seconds <= 0:
        return
    with _lock:
        data = measured(home)
        old = data.get(spec, {})
        now = seconds / tokens
        prev = old.get("s_per_token")
        runs = int(old.get("runs", 0)) + 1
        value = now if not isinstance(prev, (int, float)) else (1 - _WEIGHT) * prev + _WEIGHT * now
        data[spec] = {"s_per_token": round(value, 6), "runs": runs}
        path = Path(home) / SPEEDS
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{SPEEDS}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)  # a reader sees the old file or the new one


def seconds_per_token(settings: Settings) -> dict[str, tuple[float | None, str]]:
    """``{tier: (seconds per token, source)}``, source ``measured (N runs)``, ``estimated from its weights`` or
    ``unknown`` (then None)."""
    home, models_dir = Path(settings.home), settings.models_dir
    seen, specs = measured(home), tier_specs(settings)
    got = {t: seen.get(spec, {}).get("s_per_token") for t, spec in specs.items()}
    if all(isinstance(v, (int, float)) and v > 0 for v in got.values()):
        return {t: (float(got[t]), f"measured ({int(seen[spec].get('runs', 0))} runs)")  # type: ignore[arg-type]
                for t, spec in specs.items()}
    # like with like: while one tier is unmeasured, every tier is priced by its weights (a measured figure beside
    # an estimate would compare a machine's real speed with a rule of thumb)
    out: dict[str, tuple[float | None, str]] = {}
    for tier, spec in specs.items():
        prior = prior_seconds_per_token(spec, models_dir, settings.hf_weights)
        out[tier] = (prior, "estimated from its weights" if prior else "unknown")
    return out


def prices(settings: Settings, actions: tuple[str, ...]) -> dict[str, float]:
    """Each tier action's price per token relative to the slowest tier (1.0), in ``settings.cost_unit``; {} when
    every action costs alike (one tier, the ``tokens`` unit, or no speed known for some tier)."""
    if not settings.tiers or settings.cost_unit == "tokens":
        return {}
    speeds = {t: s for t, (s, _) in seconds_per_token(settings).items()}
    if any(s is None for s in speeds.values()):
        return {}
    slowest = max(s for s in speeds.values() if s is not None)
    return {a: round(speeds.get(split_action(a)[1], slowest) / slowest, 4) for a in actions}  # type: ignore[operator]
