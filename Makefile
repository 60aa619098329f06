# Set-up and everyday commands. The virtual environment lives in .venv and is made on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The torch requirement. The default pin installs the CPU wheel that lies on the CI machines' disk and the
# normal CUDA build from PyPI on a Linux GPU machine. Override it, e.g. TORCH="torch" for the newest release,
# or TORCH_INDEX=https://download.pytorch.org/whl/cpu for a CPU-only build elsewhere.
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
CONFIG ?= configs/sample_transformer.yaml
SUITE ?= sample
BUDGET ?=
SET ?=
BENCH_ARGS ?=

STAMP := $(VENV)/.installed

.PHONY: install data train test lint demo compare bench gpu-check docs results clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install --quiet -e ".[dev,deploy]"
	touch $(STAMP)

install: $(STAMP)

data: $(STAMP)
	$(BIN)/nmt-prepare $(CONFIG) $(SET)

train: $(STAMP)
	$(BIN)/nmt-train $(CONFIG) $(SET)

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check nmt tests scripts

docs: $(STAMP)
	$(BIN)/nmt-config-doc > docs/config.md

results: $(STAMP)
	$(BIN)/python scripts/results_table.py
	$(BIN)/python scripts/compare_table.py

demo: $(STAMP)
	$(BIN)/python scripts/demo.py

compare: $(STAMP)
	$(BIN)/python scripts/compare_suite.py $(SUITE) $(if $(BUDGET),--budget $(BUDGET))

bench: $(STAMP)
	$(BIN)/python scripts/bench_all.py $(BENCH_ARGS)

# On a CUDA machine: tests, training precisions with MFU, kill and resume, NCCL, BLEU on CUDA (< 8 minutes);
# elsewhere one line and exit 0. Reports: benchmarks/results/gpu_check_<device>.json/.md (and $OUT when set).
# Uses the venv when there is one, else the python at hand (a GPU machine with torch but no venv).
gpu-check:
	PYTHONPATH=. $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)) scripts/gpu_check.py

# The committed comparison report (reports/multi30k) stays.
clean:
	rm -rf runs data/cache $(filter-out reports/multi30k,$(wildcard reports/*))
