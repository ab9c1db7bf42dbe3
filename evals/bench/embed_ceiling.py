"""How fast can this CPU embed HotpotQA paragraphs at all? The indexing target's ceiling (issue 23).

    python -m evals.bench.embed_ceiling [--questions 200] [--timed 400] [--threads 1,2] [--seconds 3]

Prints one table per embedder (fp32, int8) and thread count:

* **GEMM kernel GOP/s**: onnxruntime's own matrix multiply at MiniLM's FFN shapes (4,096 x 384 x 1,536 and
  back), built and quantized exactly as ``memory.embeddings`` builds the int8 model (dynamic, per-channel,
  reduce_range), one intra-op thread per session and N sessions at once, as the embedder runs. The dense
  layers are ~95% of MiniLM's arithmetic, so this rate bounds the whole model.
* **embedder chunks/s** on real pooled paragraphs (title + text, as indexed), and the GOP/s that is.
* **ceiling chunks/s**: the kernel rate divided by the arithmetic of one mean-length paragraph: what the
  embedder would do if every operation ran at the GEMM kernel's speed and nothing else cost time.

Arithmetic per paragraph of T tokens (hidden 384, FFN 1,536, 6 layers, multiply-add = 2 ops):
6 x (2 T (4 x 384^2 + 2 x 384 x 1,536) + 4 T^2 x 384).
"""

from __future__ import annotations

import logging
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path


from memory.embeddings import DIM, MiniLM
from memory.ingest import hotpotqa_chunks, load_hotpotqa

from evals.bench.common import parser

FFN = 1536
LAYERS = 6
ROWS = 4096  # 32 paragraphs x 128 tokens: one embedder batch


def ops_per_text(tokens: float) -> float:
    """Arithmetic (ops, multiply-add = 2) of MiniLM-L6 over one text of ``tokens`` tokens."""
    dense = 2 * tokens * (4 * DIM * DIM + 2 * DIM * FFN)
    attention = 4 * tokens * tokens * DIM
    return LAYERS * (dense + attention)


def _matmul_models(workdir: Path) -> dict[str, Path]:
    """fp32 and int8 ONNX graphs of x @ W_up @ W_down (FFN shapes; weights random, fixed seed)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    up = numpy_helper.from_array(rng.standard_normal((DIM, FFN), dtype=np.float32) * 0.05, "w_up")
    down = numpy_helper.from_array(rng.standard_normal((FFN, DIM), dtype=np.float32) * 0.05, "w_down")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w_up"], ["h"]), helper.make_node("MatMul", ["h", "w_down"], ["y"])],
        "ffn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", DIM])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", DIM])], initializer=[up, down])
    fp32 = workdir / "ffn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(fp32))
    int8 = workdir / "ffn.int8.onnx"
    logging.disable(logging.WARNING)  # the quantizer's advice to pre-process: irrelevant for two MatMuls
    try:
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8, per_channel=True, reduce_range=True)
    finally:
        logging.disable(logging.NOTSET)
    return {"fp32": fp32, "int8": int8}


def kernel_rate(path: Path, threads: int, seconds: float) -> float:
    """GOP/s of the FFN graph: ``threads`` sessions of one intra-op thread each, running at once."""
    import numpy as np
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sessions = [ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]) for _ in range(threads)]
    x = np.random.default_rng(1).standard_normal((ROWS, DIM), dtype=np.float32)
    for s in sessions:
        s.run(None, {"x": x})  # warm
    counts = [0] * threads
    stop = time.perf_counter() + seconds

    def work(i: int) -> None:
        while time.perf_counter() < stop:
            sessions[i].run(None, {"x": x})
            counts[i] += 1

    t0 = time.perf_counter()
    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    wall = time.perf_counter() - t0
    return sum(counts) * 2 * (2 * ROWS * DIM * FFN) / wall / 1e9


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--questions", type=int, default=200, help="HotpotQA questions whose paragraphs form the pool")
    ap.add_argument("--timed", type=int, default=400, help="paragraphs embedded per row")
    ap.add_argument("--threads", default="1,2", help="thread counts (comma separated)")
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds per kernel measurement")
    ap.add_argument("--target", type=float, default=100.0, help="the chunks/s target to compare with")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]

    texts = [c.embed_text() for c in hotpotqa_chunks(load_hotpotqa()[: args.questions])]
    subset = random.Random(0).sample(texts, min(args.timed, len(texts)))
    probe = MiniLM()
    lengths = [len(e.ids) for e in probe._tok.encode_batch(subset)]
    mean_tokens = sum(lengths) / len(lengths)
    # Exact arithmetic of the timed texts (attention is quadratic, so not mean-length x count).
    total_ops = sum(ops_per_text(n) for n in lengths)
    per_text = total_ops / len(subset)
    print(f"{len(subset)} paragraphs, mean {mean_tokens:.1f} tokens; {per_text / 1e9:.2f} GOP per paragraph; "
          f"{args.target:.0f} chunks/s needs {args.target * per_text / 1e9:.0f} GOP/s. load {os.getloadavg()[0]:.1f}",
          flush=True)

    rows = []
    with tempfile.TemporaryDirectory(prefix="embed-ceiling-") as tmp:
        graphs = _matmul_models(Path(tmp))
        for name in ("fp32", "int8"):
            for n in threads:
                kernel = kernel_rate(graphs[name], n, args.seconds)
                emb = MiniLM(threads=n, int8=name == "int8")
                emb.embed_array(subset[:8])
                t0 = time.perf_counter()
                emb.embed_array(subset)
                rate = len(subset) / (time.perf_counter() - t0)
                rows.append((name, n, kernel, rate, rate * per_text / 1e9, kernel * 1e9 / per_text))
                print(rows[-1], flush=True)

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"MiniLM-L6 on HotpotQA paragraphs (mean {mean_tokens:.0f} tokens) vs the GEMM kernel, "
                        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    for col in ("model", "threads", "GEMM kernel GOP/s", "embedder chunks/s", "embedder GOP/s",
                "share of kernel", "ceiling chunks/s", f"target {args.target:.0f} needs"):
        table.add_column(col, justify="right")
    for name, n, kernel, rate, gops, ceiling in rows:
        table.add_row(name, str(n), f"{kernel:.1f}", f"{rate:.1f}", f"{gops:.1f}", f"{gops / kernel:.0%}",
                      f"{ceiling:.1f}", f"{args.target / ceiling:.2f}x the kernel")
    Console(width=200).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
