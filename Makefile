# `make run` starts the app; `make test` runs every check. Both create .venv and install on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
PORT ?= 8501
# glibc returns every large buffer to the OS and maps fresh zeroed pages for the next one; a trace
# keeps ~170 MiB of new tensors at n = 512, so keeping freed memory in the heap makes BERT traces
# (and plain forwards) about a third faster. bench/hooked.py: 422 -> 236 ms at n = 512.
# Two arenas: with one per thread (glibc's default), each session's script thread keeps its own
# freed trace memory: 30 sessions at 512 tokens peaked at 7.8 GB RSS, 5.9 GB with two arenas, and
# 3.3 GB once sessions stopped holding traces (bench/load.py --tokens 512 --sessions 30 --no-baseline).
MALLOC := MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=536870912 MALLOC_ARENA_MAX=2
# torch's OpenMP threads spin ~300k times before sleeping: with two traces at once on two cores they
# spun against each other. 30 sessions: server CPU 8.0 -> 6.5 s, p95 0.53 -> 0.43 s; one user's
# trace no slower (bench/load.py; bench/hooked.py).
SERVE_ENV := $(MALLOC) GOMP_SPINCOUNT=10000

.PHONY: run test lint unit e2e bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(RUN_STAMP): requirements.txt | $(PY)
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

$(TEST_STAMP): requirements.txt requirements-test.txt | $(PY)
	$(PY) -m pip install --quiet -r requirements-test.txt
	@# Browser tests use Debian's chromium (Playwright never downloads a browser here), and the
	@# screenshots need a CJK font to show the Chinese interface; tests/test_deploy.py runs
	@# deploy/nginx.conf with Debian's nginx.
	@{ command -v chromium && fc-list :lang=zh | grep -q . && test -x /usr/sbin/nginx ; } >/dev/null 2>&1 || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium fonts-noto-cjk nginx; }
	touch $(RUN_STAMP) $@

# attnviz.ui.launch is `streamlit run` with the bundled model loading in the background from the start.
run: $(RUN_STAMP)
	$(SERVE_ENV) $(PY) -m attnviz.ui.launch attnviz/app.py --server.port $(PORT) --browser.gatherUsageStats false

test: $(TEST_STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(PY) -m pytest

unit: $(TEST_STAMP)
	$(PY) -m pytest -m "not e2e"

e2e: $(TEST_STAMP)
	$(PY) -m pytest -m e2e

# bench/load.py starts its own servers (`make run`'s settings); BENCH_FLAGS=--quick for a short run.
bench: $(TEST_STAMP)
	$(MALLOC) $(PY) bench/engine.py
	$(MALLOC) $(PY) bench/hooked.py
	$(MALLOC) $(PY) bench/hostile.py
	$(PY) bench/load.py $(BENCH_FLAGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
