# Two entry points: `make run` starts the bot, `make test` runs lint, types and the whole suite.
# Both create the virtualenv on first use and reinstall when a requirements file changes.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run test check stress console backup lint clean astrbot-plugin

# The suite runs on this many pytest-xdist workers: twice the cores, so both stay busy while some tests wait on
# the processes and servers they start (docs/testing.md has the measured times). `loadfile` keeps
# each module on one worker: a module of real AstrBot tests runs in order on one AstrBot. xdist would hand out
# the modules with the most tests first; tests/conftest.py orders them by how long they take instead.
TEST_WORKERS ?= 4
# What `make check` leaves out: the kinds that start processes, build virtualenvs or need the servers.
FAST := not process and not astrbot and not packaging and not postgresql and not redis and not browser
# pytest keeps its assertion-rewritten test modules as bytecode beside them unless PYTHONDONTWRITEBYTECODE is set,
# as it is in some shells and CI images: each worker would then rewrite every test module again (~3 s of CPU).
PYTEST := PYTHONDONTWRITEBYTECODE= $(PY) -m pytest
# The bot too: the virtualenv is installed without bytecode (below), written as modules are first imported.
RUN := PYTHONDONTWRITEBYTECODE= $(PY)

# requirements.txt is everything the bot runs with (the wheel's dependencies and all its extras);
# requirements-dev.txt adds the test, lint and type tools.
RUNTIME := requirements.txt

# The Python must be 3.11+, checked before anything is created; a virtualenv another Python built (a failed
# try with an older one) is built again rather than reused.
PYCHECK = import sys; sys.exit(0 if sys.version_info >= (3, 11) else 2)
PYVERSION = import sys; print(sys.executable and "%d.%d" % sys.version_info[:2])

# Creates the virtualenv when there is none (or another Python built it) and installs $(1) into it: one pip
# run, so a first `make test` resolves the bot's and the tools' requirements together. --no-compile: pip would
# compile all ~9,000 modules of the requirements to bytecode one by one (two thirds of the install's time, ~30 s
# here); Python writes the bytecode of the few thousand a run imports the first time it imports them.
define install
	@$(PYTHON) -c '$(PYCHECK)' 2>/dev/null || { found=$$($(PYTHON) --version 2>/dev/null | head -1); \
		echo "make: needs Python 3.11 or newer; PYTHON=$(PYTHON) is $${found:-not found}" >&2; exit 2; }
	@if [ -x $(PY) ] && [ "$$($(PY) -c '$(PYVERSION)' 2>/dev/null)" != "$$($(PYTHON) -c '$(PYVERSION)')" ]; then \
		echo "$(VENV) was built by another Python; building it again with $(PYTHON)"; rm -rf $(VENV); fi
	@echo "Installing the requirements into $(VENV) (once, and again when a requirements file changes);"
	@echo "this usually takes 1-3 minutes (aiogram, openai, pandas, jieba, matplotlib and their dependencies)..."
	@if [ ! -x $(PY) ]; then $(PYTHON) -m venv $(VENV) && $(PY) -m pip install --quiet --upgrade pip; fi
	$(PY) -m pip install --quiet --no-compile -r $(1)
	@echo "Installed."
endef

$(VENV)/.runtime: $(RUNTIME)
	$(call install,requirements.txt)
	touch $@

# requirements-dev.txt includes requirements.txt: what `make run` needs is installed too.
$(VENV)/.dev: $(RUNTIME) requirements-dev.txt
	$(call install,requirements-dev.txt)
	touch $(VENV)/.runtime $@

run: $(VENV)/.runtime
	$(RUN) bot.py

console: $(VENV)/.runtime
	$(RUN) bot.py console

backup: $(VENV)/.runtime
	$(RUN) bot.py backup

lint: $(VENV)/.dev
	$(PY) -m ruff check .
	$(PY) -m mypy

test: lint
	$(PYTEST) -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The developer's loop: lint, types and the tests of what changed (tests/affected.py: the test modules that
# import a changed module, directly or not; all of them after a change to what every test stands on) that need
# no process, server or virtualenv. `make test` runs everything.
check: lint
	@tests=$$($(PY) -m tests.affected) || exit 2; \
	if [ -z "$$tests" ]; then echo "make check: no Python file changed (git status); make test runs everything"; exit 0; fi; \
	if [ "$$tests" = "--all" ]; then tests=; fi; \
	$(PYTEST) -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "$(FAST)" $$tests; code=$$?; \
	if [ $$code -eq 5 ]; then echo "make check: the changed modules have only slow tests; make test runs them"; exit 0; fi; \
	exit $$code

# The long reliability proofs (docs/testing.md, "Stress"); figures land in bench/results/stress.json.
stress: $(VENV)/.dev
	STRESS=full FUZZ_EXAMPLES=300 $(PY) -m pytest -p no:cacheprovider tests/stress tests/test_fuzz_inputs.py \
		tests/test_fuzz_edges.py tests/test_keyboards_fuzz.py tests/test_backup_scopes.py tests/test_fuzz_recovery.py \
		tests/test_workers_process.py

# The AstrBot plugin: dist/astrbot_plugin_companion_memory/ and its zip (docs/astrbot.md).
astrbot-plugin:
	$(PYTHON) -m companion.hosts.astrbot.build dist

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
