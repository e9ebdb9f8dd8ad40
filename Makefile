# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# Each creates (or reuses) the virtual environment in .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: env demo test bench clean

env: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, pinned: a CPU build lies on disk; an unpinned torch pulls a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,sharded]'
	# evalplus (tasks humaneval+, mbpp+) without its LLM API clients and protobuf pin: only what its data
	# loaders and oracles import. `pip install 'judgekit[code]'` is the one-line (heavier) alternative.
	$(BIN)/pip install -q --no-deps evalplus
	$(BIN)/pip install -q appdirs tempdir wget psutil
	# LiveCodeBench's official grader, so tests/test_tasks_lcb_parity.py compares verdicts with it (the test
	# skips that comparison where it is absent). --no-deps: its own pins would replace torch; it needs only numpy.
	$(BIN)/pip install -q --no-deps nvidia-livecodebench
	# BFCL's data and AST checker (the bfcl task needs it; tests/test_tasks_bfcl_parity.py compares verdicts with
	# BFCL's own pipeline). --no-deps: its pins (numpy 1.26.4, API SDKs) are for its own runners, not the checker.
	$(BIN)/pip install -q --no-deps bfcl-eval
	touch $(STAMP)

demo: env
	$(BIN)/judgekit demo

# Two workers, one test file each at a time (module fixtures are built once): the suite's time halves on two cores.
test: env
	$(BIN)/python -m pytest -p no:cacheprovider -n 2 --dist loadfile

bench: env
	$(BIN)/judgekit bench decode

clean:
	rm -rf $(VENV) build *.egg-info
