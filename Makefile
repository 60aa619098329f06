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
OUT ?=
SET ?=
BENCH_ARGS ?=
PYTEST_ARGS ?=
MODEL ?= runs/sample_transformer

STAMP := $(VENV)/.installed

.PHONY: install data train test check lint demo compare bench gpu-check docs results clean serve recipe recipe-steps

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install --quiet -e ".[dev,deploy,serve,hf]"
	touch $(STAMP)

install: $(STAMP)

data: $(STAMP)
	$(BIN)/nmt-prepare $(CONFIG) $(SET)

train: $(STAMP)
	$(BIN)/nmt-train $(CONFIG) $(SET)

# More training text through the model itself (docs/training.md, "More data through the model: the recipe"): the
# reverse model back-translates task 2's English (greedy search: val chose it over sampling), the model trained with
# that back-translation (the teacher) forward-translates task 2's German and distils task 1's German, and the
# student trains on the mixture, once per seed of STUDENT_SEEDS. `make recipe-steps` makes the runs val chose from
# and that measure each ingredient: the same chain with a sampled back-translation (its teacher, the teacher plus
# forward translation, its students). Every stage makes a file (a finished training its runs/NAME/eval_test.json),
# so a re-run skips what is done and resumes a killed training or translation. SET goes to every training, e.g.
# SET="--set train.threads=1". The commands are the ones that made results/synthetic/ and the archived runs (a
# model of several seeds named <name>_seed<N>, as the results tables group them).
STUDENT_SEEDS ?= 1 2 3
RECIPE_DATA := data/recipe
RECIPE_PREPARE := $(BIN)/nmt-prepare configs/multi30k_transformer.yaml
REVERSE := runs/multi30k_transformer_en_de_seed1
TEACHER := runs/multi30k_recipe_bt_greedy
SAMPLED_TEACHER := runs/multi30k_recipe_bt
# a teacher's beam search at the length penalty it chose on val (its length_penalty.json): $(call TEACH,RUN)
TEACH = $(BIN)/nmt-translate -c $(1) --split-sentences off

recipe: $(foreach seed,$(STUDENT_SEEDS),runs/multi30k_recipe_student_greedy_seed$(seed)/eval_test.json)

recipe-steps: $(SAMPLED_TEACHER)/eval_test.json runs/multi30k_recipe_bt_ft/eval_test.json \
		$(foreach seed,$(STUDENT_SEEDS),runs/multi30k_recipe_student_seed$(seed)/eval_test.json)

$(REVERSE)/eval_test.json: | $(STAMP)
	$(BIN)/nmt-train configs/multi30k_transformer_en_de.yaml --set name=$(notdir $(REVERSE)) --set train.seed=1 $(SET)

$(RECIPE_DATA)/task2.en $(RECIPE_DATA)/task2.de: $(RECIPE_DATA)/task2.%: | $(STAMP)
	$(RECIPE_PREPARE) --task2 $* --output $@

$(RECIPE_DATA)/train.de $(RECIPE_DATA)/train.en: $(RECIPE_DATA)/train.%: | $(STAMP)
	$(RECIPE_PREPARE) --task1 $* --output $@

$(RECIPE_DATA)/task2.bt_greedy.de: $(REVERSE)/eval_test.json $(RECIPE_DATA)/task2.en
	$(BIN)/nmt-translate -c $(REVERSE) -i $(RECIPE_DATA)/task2.en -o $@ --split-sentences off --beam 1

$(TEACHER)/eval_test.json: $(RECIPE_DATA)/task2.bt_greedy.de
	$(BIN)/nmt-train configs/recipe/multi30k_recipe_bt_greedy.yaml $(SET)

$(RECIPE_DATA)/task2.ft_greedy.en: $(TEACHER)/eval_test.json $(RECIPE_DATA)/task2.de
	$(call TEACH,$(TEACHER)) -i $(RECIPE_DATA)/task2.de -o $@

$(RECIPE_DATA)/train.distil_greedy.en: $(TEACHER)/eval_test.json $(RECIPE_DATA)/train.de
	$(call TEACH,$(TEACHER)) -i $(RECIPE_DATA)/train.de -o $@

runs/multi30k_recipe_student_greedy_seed%/eval_test.json: $(RECIPE_DATA)/task2.bt_greedy.de \
		$(RECIPE_DATA)/task2.ft_greedy.en $(RECIPE_DATA)/train.distil_greedy.en $(RECIPE_DATA)/train.en
	$(BIN)/nmt-train configs/recipe/multi30k_recipe_student_greedy.yaml --set name=$(@D:runs/%=%) --set train.seed=$* $(SET)

$(RECIPE_DATA)/task2.bt.de: $(REVERSE)/eval_test.json $(RECIPE_DATA)/task2.en
	$(BIN)/nmt-translate -c $(REVERSE) -i $(RECIPE_DATA)/task2.en -o $@ --split-sentences off --sampling --beam 1 --seed 1

$(SAMPLED_TEACHER)/eval_test.json: $(RECIPE_DATA)/task2.bt.de
	$(BIN)/nmt-train configs/recipe/multi30k_recipe_bt.yaml $(SET)

$(RECIPE_DATA)/task2.ft.en: $(SAMPLED_TEACHER)/eval_test.json $(RECIPE_DATA)/task2.de
	$(call TEACH,$(SAMPLED_TEACHER)) -i $(RECIPE_DATA)/task2.de -o $@

$(RECIPE_DATA)/train.distil.en: $(SAMPLED_TEACHER)/eval_test.json $(RECIPE_DATA)/train.de
	$(call TEACH,$(SAMPLED_TEACHER)) -i $(RECIPE_DATA)/train.de -o $@

runs/multi30k_recipe_bt_ft/eval_test.json: $(RECIPE_DATA)/task2.bt.de $(RECIPE_DATA)/task2.ft.en
	$(BIN)/nmt-train configs/recipe/multi30k_recipe_bt_ft.yaml $(SET)

runs/multi30k_recipe_student_seed%/eval_test.json: $(RECIPE_DATA)/task2.bt.de $(RECIPE_DATA)/task2.ft.en \
		$(RECIPE_DATA)/train.distil.en $(RECIPE_DATA)/train.en
	$(BIN)/nmt-train configs/recipe/multi30k_recipe_student.yaml --set name=$(@D:runs/%=%) --set train.seed=$* $(SET)

# The tests, the figures check among them (tests/test_check.py runs `make check` once), in TEST_WORKERS processes
# (pytest-xdist; TEST_WORKERS=0 runs them in this one). A module whose tests share a costly fixture (a trained
# model, a server, a torchrun launch) runs whole in one process (tests/conftest.py names them); the rest go where
# there is room.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# Every committed figure against its evidence: generated blocks regenerated, translations re-scored against the
# Multi30k test references (NMT_DATA_MIRROR, ../shared/data/multi30k or the download), one bootstrap redone.
check: $(STAMP)
	$(BIN)/python -m tools.check

lint: $(STAMP)
	$(BIN)/ruff check nmt tests scripts benchmarks tools

docs: $(STAMP)
	$(BIN)/nmt-config-doc > docs/config.md

results: $(STAMP)
	$(BIN)/python -m tools.results_table
	$(BIN)/python -m tools.compare_table
	$(BIN)/python -m tools.synthetic report
	$(BIN)/python -m tools.val_table

# The translation service and attention explorer on http://127.0.0.1:8000 (docs/serve.md).
serve: $(STAMP)
	$(BIN)/nmt-serve -c $(MODEL)

demo: $(STAMP)
	$(BIN)/python scripts/demo.py

# The report goes to reports/local/$(SUITE); OUT=reports/multi30k rewrites the committed comparison instead.
compare: $(STAMP)
	$(BIN)/python -m benchmarks.compare_suite $(SUITE) $(if $(BUDGET),--budget $(BUDGET)) $(if $(OUT),--out $(OUT)) $(SET)

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run_all $(BENCH_ARGS)

# On a CUDA machine (< 8 minutes, see docs/gpu.md): preflight, data caches on the CPU, training precisions with
# MFU and host syncs, kill and resume, NCCL, greedy BLEU on CUDA against the CPU, device-aware tests; elsewhere
# one line and exit 0 (`python -m benchmarks.gpu_check --dry-run-cpu` runs the same plumbing on the CPU). Reports,
# rewritten after every check: benchmarks/results/gpu_check_<device>.json/.md (and $OUT when set).
# Uses the venv when there is one, else the python at hand (a GPU machine with torch but no venv).
gpu-check:
	$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)) -m benchmarks.gpu_check

# The committed comparison report (reports/multi30k) stays.
clean:
	rm -rf runs data/cache $(filter-out reports/multi30k,$(wildcard reports/*))
