# Targets: demo, test (the offline suite, CI's), smoke (a handful of fast checks, under a minute),
# test-distributed (torchrun and Ray: processes and a local cluster,
# 2 min), test-fast (unit + methods, < 2 min), test-docs (every block
# of README.md and docs/ run at tiny size), browser (chromium for the
# real-browser test), docs (docs/methods.md), leaderboard (docs/leaderboard.md from results/), lint, install, bench,
# clean-runs. All but browser create .venv when missing.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
# Extra pytest arguments, e.g. `make test-fast PYTEST_ARGS=--durations=25`.
PYTEST_ARGS ?=
# pytest's verbosity: -q (dots) for a person at the terminal; .ci/run sets PYTEST_QUIET= so that CI's log names
# every test file with its dots (which file failed is on the line before the F)
PYTEST_QUIET ?= -q
# The fast tier leaves out what spawns torchrun, starts Ray, drives a browser or is heavy (markers in pyproject.toml).
FAST_MARKS  := not slow and not torchrun and not ray and not browser and not heavy
BROWSERS    := chromium chromium-browser google-chrome

.PHONY: demo test smoke test-distributed test-fast test-docs browser docs leaderboard lint install clean-runs bench

# The virtual environment takes about 6.2 GiB (torch, triton and the CUDA libraries are 5.2 GiB of it): check the
# disk before creating it, so a full disk ends in one line rather than in pip's OSError halfway through.
MIN_FREE_GIB ?= 6.5

$(BIN)/python:
	@$(PY) -c "import os, shutil, sys; d = os.path.dirname(os.path.abspath('$(VENV)')) or '.'; \
	free = shutil.disk_usage(d).free / 2**30; ok = free >= $(MIN_FREE_GIB); \
	ok or print(f'error: {free:.1f} GiB free in {d}; the virtual environment ($(VENV)) needs about \
	$(MIN_FREE_GIB) GiB (torch and its CUDA libraries): free some space and run make again', file=sys.stderr); \
	sys.exit(0 if ok else 2)"
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall only when requirements or packaging change (idempotent: a second call does nothing). The demo
# needs only requirements.txt; tests, lint and the extras they exercise (timm, Ray, Optuna) add
# requirements-dev.txt.
# --no-compile: pip would byte-compile all of torch's ~5 GB install (about 25 s here); Python compiles
# the modules a command imports the first time it imports them (about 10 s, once). The editable
# install builds with the venv's own setuptools (no isolated build environment to fetch).
$(STAMP): $(BIN)/python requirements.txt pyproject.toml
	$(BIN)/python -m pip install --quiet --no-compile -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-compile --no-deps --no-build-isolation -e .
	@touch $(STAMP)

$(DEV_STAMP): $(STAMP) requirements-dev.txt
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	@touch $(DEV_STAMP)

install: $(DEV_STAMP)

demo: $(STAMP)
	$(BIN)/unlearnkit run --dataset mnist5k --model small_cnn --forget-classes 3 \
	    --methods finetune,gradient_ascent --seed 0 --references 1 --out runs/demo

# The whole offline suite (`slow` and `docs` are left out, by pyproject.toml's addopts). It does not install a
# browser: without one the real-browser test skips and says `make browser`.
test: $(DEV_STAMP)
	$(BIN)/python -m pytest $(PYTEST_QUIET) $(PYTEST_ARGS)

# Under a minute on 2 cores, nothing trained: the import contract, the CLI's and the API's bad-input sweeps
# (tests/sweep: every option, file kind and public function against each family of bad input), the docs
# tier's rules, the table width, the atomic writer and locks on a full disk.
SMOKE := tests/unit/test_layering.py tests/sweep tests/docs/test_docblocks.py tests/unit/test_tables.py \
	tests/unit/test_input_checks.py "tests/integration/test_faults.py::test_a_full_disk_in_torch_save_is_a_write_failed_naming_the_file" \
	"tests/integration/test_faults.py::test_write_together_leaves_all_files_or_none" \
	"tests/integration/test_faults.py::test_a_lock_is_exclusive_and_leaves_no_file" \
	"tests/integration/test_faults.py::test_tune_without_optuna_says_how_to_install_it"
smoke: $(DEV_STAMP)
	$(BIN)/python -m pytest $(PYTEST_QUIET) $(SMOKE) $(PYTEST_ARGS)

test-distributed: $(DEV_STAMP)
	$(BIN)/python -m pytest $(PYTEST_QUIET) -m "(torchrun or ray) and not slow" $(PYTEST_ARGS)

test-fast: $(DEV_STAMP)
	$(BIN)/python -m pytest $(PYTEST_QUIET) tests/unit tests/methods -m "$(FAST_MARKS)" $(PYTEST_ARGS)

# Docs that run: every bash/console/python block of README.md and docs/*.md at tiny size, in-process
# (tests/docs/, marker `docs`; left out of `make test` by pyproject.toml's addopts; .ci/run runs it).
test-docs: $(DEV_STAMP)
	$(BIN)/python -m pytest $(PYTEST_QUIET) tests/docs -m docs $(PYTEST_ARGS)

# Chromium for tests/integration/test_report_html.py: nothing to do when one is on PATH; apt-get install
# as root where apt-get exists; otherwise one line saying how.
browser:
	@for b in $(BROWSERS); do p=$$(command -v $$b) && { echo "browser: $$p"; exit 0; }; done; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -qq chromium || { apt-get update -qq && apt-get install -y -qq chromium; }; \
	else \
	    echo "no browser found ($(BROWSERS)): install one, e.g. as root: apt-get install chromium"; \
	fi

docs: $(STAMP)
	$(BIN)/unlearnkit list methods --markdown --out docs/methods.md

# docs/leaderboard.md from what `unlearnkit bench` (benchmarks/configs/cpu.yaml, mnist5k_class.yaml) and
# `unlearnkit forgetting-quality --out results/fq/<task>` wrote (docs/results.md lists the commands).
leaderboard: $(STAMP)
	$(BIN)/unlearnkit report --db results/unlearnkit.db --db results/mnist5k_class.db \
	    --forgetting-quality results/fq --out results/report --leaderboard docs/leaderboard.md

lint: $(DEV_STAMP)
	$(BIN)/ruff check src tests benchmarks examples

bench: $(DEV_STAMP)
	$(BIN)/python benchmarks/train_throughput.py

clean-runs:
	rm -rf runs
