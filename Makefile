# One entry point for the project. `make book` and `make test` each create the
# pinned environment (.venv) first if it is missing or out of date.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
LOWEST := .venv-lowest
FLAX06 := .venv-flax06
RGEMMA := .venv-recurrentgemma
FLOOR := .venv-floor
TORCH := .venv-torch
# Two workers for two cores; loadscope keeps each notebook's cells (and each test
# module) on one worker, so a notebook runs top to bottom in one kernel.
PARALLEL := -n 2 --dist loadscope
NBVAL := --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=120

# Packages go in with uv (itself installed by pip into each environment, at a pinned
# version): the same pinned sets, but the book's environment takes about 40 s instead of
# pip's 95 s on this machine, and make test builds three environments. Like pip, it
# compiles the bytecode at install time: where PYTHONDONTWRITEBYTECODE is set (as on
# this project's machines) nothing else would, and every test worker and notebook
# kernel would compile jax again (10 s per import instead of 3.5 s).
UV := uv==0.13.9
install = $(1)/bin/python -m pip install --quiet $(UV) && \
	$(1)/bin/python -m uv pip install --quiet --compile-bytecode --python $(1)/bin/python $(2)

.PHONY: env book lab test test-pinned test-lowest test-floor test-arithmetic notebooks bench bench-sweep bench-linear clean

env: $(VENV)/.stamp
$(VENV)/.stamp: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(call install,$(VENV),-r requirements.txt)
	touch $@

# The lowest versions pyproject.toml claims to support (tests/lowest.txt).
$(LOWEST)/.stamp: tests/lowest.txt pyproject.toml
	$(PYTHON) -m venv $(LOWEST)
	$(call install,$(LOWEST),-r tests/lowest.txt)
	touch $@

# The oldest jax and flax the chapters run on (tests/floor.txt), stated in the intro.
$(FLOOR)/.stamp: tests/floor.txt pyproject.toml
	$(PYTHON) -m venv $(FLOOR)
	$(call install,$(FLOOR),-r tests/floor.txt)
	touch $@

# The real Flax 0.6.11, the oracle of rnnlib.legacy (tests/parity/test_legacy_oracle.py).
$(FLAX06)/.stamp: tests/oracle/requirements-flax06.txt
	$(PYTHON) -m venv $(FLAX06)
	$(call install,$(FLAX06),-r tests/oracle/requirements-flax06.txt)
	touch $@

# recurrentgemma 1.0.1, the oracle of rnnlib.RGLRUCell (tests/parity/test_rglru_oracle.py). It pins
# numpy below the book's, so it gets an environment of its own.
$(RGEMMA)/.stamp: tests/oracle/requirements-recurrentgemma.txt
	$(PYTHON) -m venv $(RGEMMA)
	$(call install,$(RGEMMA),-r tests/oracle/requirements-recurrentgemma.txt)
	touch $@

# PyTorch's CPU build, the oracle of rnnlib.torch_weights (tests/parity/test_torch_weights.py). pip,
# not uv: pip's configured wheel folders hold the CPU wheel, uv would fetch the CUDA build.
$(TORCH)/.stamp: tests/oracle/requirements-torch.txt
	$(PYTHON) -m venv $(TORCH)
	$(TORCH)/bin/python -m pip install --quiet -r tests/oracle/requirements-torch.txt
	touch $@

# Build the HTML book into _build/html. Outputs are the stored ones that
# `make test` checks with nbval; `make notebooks` regenerates them.
book: env
	$(VENV)/bin/jupyter-book build . -W -n --keep-going

# Open the chapters in JupyterLab, in the pinned environment: what the intro tells readers
# who run the book locally. With jupytext installed, the .md pairs in book/md open as notebooks.
# JupyterLab is pinned here and installed on first use rather than in requirements.txt: its
# dependencies make every nbformat import about 3 s slower (rfc3987-syntax, through
# jsonschema's format checks), which every test worker and notebook run would pay.
JUPYTERLAB := jupyterlab==4.6.6
$(VENV)/.lab-stamp: $(VENV)/.stamp
	$(call install,$(VENV),$(JUPYTERLAB))
	touch $@

lab: $(VENV)/.lab-stamp
	$(VENV)/bin/jupyter-lab book/

# Every test: unit, property, parity with Flax, hygiene, strict nbval over every
# chapter, then the unit tests again on the lowest supported jax and flax, and every
# chapter executed on the oldest jax and flax the book states.
test: test-pinned test-lowest test-floor

# The processes of one test run (pytest's workers, each chapter's kernel) share what they
# compile through JAX's persistent compilation cache: the exercise tests, for one, ask again
# for the checkers' references that the chapters compiled. Each run starts from an empty
# cache, so nothing carries over from an earlier run or another version of jax. The size
# limit is there for its side effect: with one, jax locks the cache (filelock), so a worker
# never reads a program another is still writing.
CACHE := .jax-cache
with-cache = rm -rf $(CACHE)/$(1) && JAX_COMPILATION_CACHE_DIR=$(CURDIR)/$(CACHE)/$(1) \
	JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0.2 JAX_COMPILATION_CACHE_MAX_SIZE=4294967296

# The chapters go first: they are the longest units of work, and loadscope hands out whole
# notebooks, so the many short test modules after them even out the two workers' finish.
test-pinned: env $(FLAX06)/.stamp $(RGEMMA)/.stamp $(TORCH)/.stamp
	$(call with-cache,pinned) $(PY) -m pytest $(PARALLEL) book tests $(NBVAL) -m "not floor_env"

# The library's own tests (not the tooling around the book) on the lowest versions.
LIBRARY_TESTS := tests/unit/test_errors.py tests/unit/test_module.py tests/parity/test_parity_cells.py \
	tests/parity/test_parity_rnn.py tests/parity/test_parity_bidirectional.py tests/property/test_properties.py \
	tests/property/test_transforms.py tests/parity/test_legacy.py tests/parity/test_interop.py tests/unit/test_sharding.py \
	tests/unit/test_speed_paths.py tests/unit/test_tolerance.py tests/unit/test_stacked.py tests/unit/test_dropout.py \
	tests/unit/test_linear_rnn.py tests/unit/test_composition.py tests/unit/test_silent_cases.py \
	tests/unit/test_papercuts.py tests/unit/test_resets.py tests/unit/test_linear_precision.py \
	tests/unit/test_plan_resolved.py tests/parity/test_nnx_layers.py

test-lowest: $(LOWEST)/.stamp
	$(LOWEST)/bin/python -m pytest $(PARALLEL) $(LIBRARY_TESTS) -m "not pinned_env"

# Every chapter, top to bottom, on the floor versions (outputs not compared). Each test is a
# whole chapter in its own kernel, so the chapters are shared out one by one (--dist load):
# loadscope would keep the whole module, every chapter, on one worker. Then, on the floor's
# JAX, the resolved plan says why the whole-sequence gradient rule is off there.
test-floor: $(FLOOR)/.stamp
	$(FLOOR)/bin/python -m pytest -n 2 --dist load tests/notebooks/test_chapters_floor.py
	$(FLOOR)/bin/python -m pytest -q tests/unit/test_plan_resolved.py -k "transpose or note"

# The tests that compare two orders of arithmetic, again under each XLA CPU setting of
# tests/arithmetic.py (CONTRIBUTING, "Orders of arithmetic"): about 8 minutes a setting.
test-arithmetic: env $(FLAX06)/.stamp $(RGEMMA)/.stamp
	$(PY) -m tests.arithmetic

# Re-execute every chapter in place, top to bottom, so stored outputs come from a real run.
# Each chapter's text is first taken from whichever of book/NAME.ipynb and its pair
# book/md/NAME.md was edited (git tells which, not file times), and the .md is rewritten
# from the executed notebook afterwards, so the two stay in sync.
notebooks: env
	$(PY) -m tests.execute_notebooks book

bench: env
	$(PY) -m benchmarks.run

# The sweep over batch x width (benchmarks/README.md): 31 to 58 minutes on the 2-core machines.
bench-sweep: env
	$(PY) -m benchmarks.sweep

# Linear cells (minGRU, RG-LRU) step by step against one associative scan, and the LSTM.
bench-linear: env
	$(PY) -m benchmarks.linear_scan

clean:
	rm -rf _build $(CACHE) $(VENV) $(LOWEST) $(FLAX06) $(RGEMMA) $(FLOOR) $(TORCH)
