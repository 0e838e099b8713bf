# README's two commands: `make demo` and `make test`. Both create .venv with pip when missing.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: demo test lint install clean-runs bench

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall only when requirements or packaging change (idempotent: a second call does nothing).
$(STAMP): $(BIN)/python requirements.txt pyproject.toml
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/unlearnkit run --dataset mnist5k --model small_cnn --forget-classes 3 \
	    --methods finetune,gradient_ascent --seed 0 --out runs/demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/train_throughput.py

clean-runs:
	rm -rf runs
