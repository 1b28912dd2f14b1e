# minirepro: `make test` (every check) and `make book` (the rendered book).
# Each target creates .venv when missing and installs into it; the install is
# skipped when pyproject.toml and requirements.lock have not changed.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.PHONY: help install book test unit integration fuzz goldens-check goldens-built goldens-portable smoke goldens ledger lint lock clean browser labs lab-report

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export TQDM_DISABLE := 1
export PYTHONHASHSEED := 0

help:
	@echo "make test     unit tests, integration tests, a smoke book build checked against the goldens,"
	@echo "              the goldens under a second kernel set, the browser check; a table of each"
	@echo "              stage's time (CI)"
	@echo "make unit     the unit tests (tests/unit)"
	@echo "make integration  whole systems: toy book builds, labs graded by otter, Dask, replications"
	@echo "make book     build the whole book at book scale and print where index.html is"
	@echo "make smoke    build the book at smoke scale (warnings are errors)"
	@echo "make fuzz     the property tests with random search (hypothesis profile dev)"
	@echo "make goldens  re-make the smoke goldens (after changing a chapter)"
	@echo "make ledger   re-run every chapter at book scale and refresh the claims ledger"
	@echo "make labs     the course pack: student editions and autograders in _build/labs"
	@echo "make lock     re-write requirements.lock from the installed environment"
	@echo "make clean    remove the build, the runs and the venv"

# The install uses uv (the version the lock pins: flwr needs it anyway; itself installed by
# pip into the venv first), many times faster than pip on the lock's 258 wheels, and falls
# back to pip when uv cannot be had or fails (NO_UV=1 forces pip). uv reads neither pip.conf
# nor PIP_* variables, so pip's own settings (index URLs, find-links: where this machine's
# CPU torch wheel comes from, the constraint file, the certificate) are passed on to it;
# like pip, it takes the best match across all indexes. Both install exactly
# requirements.lock, --no-deps. --compile-bytecode, as pip does: where PYTHONDONTWRITEBYTECODE is
# set (it is on this project's machines), nothing would ever be compiled, and every kernel and
# subprocess would re-compile torch, pandas and matplotlib from source on each start.
UV_VERSION := $(or $(shell sed -n 's/^uv==//p' requirements.lock),0.13.9)
NO_UV ?=
PIP_INSTALL := $(BIN)/python -m pip install -q --disable-pip-version-check --no-deps
$(STAMP): pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing into $(VENV) (a minute or two the first time)"
	@pipconf() { $(BIN)/python -m pip config list 2>/dev/null | sed -n "s/^[^.]*\.$$1='\(.*\)'$$/\1/p" | awk 'NR == 1' || true; }; \
	uv_install() { \
	    local args=(--python $(BIN)/python --no-deps --compile-bytecode --index-strategy unsafe-best-match) u cert; \
	    for u in $$(pipconf index-url); do args+=(--index-url "$$u"); done; \
	    for u in $$(pipconf extra-index-url); do args+=(--extra-index-url "$$u"); done; \
	    for u in $$(pipconf find-links); do args+=(--find-links "$$u"); done; \
	    for u in $$(pipconf constraint); do args+=(--constraint "$$u"); done; \
	    cert=$$(pipconf cert); if [ -n "$$cert" ]; then export SSL_CERT_FILE=$$cert; fi; \
	    $(BIN)/uv pip install -q "$${args[@]}" "$$@"; \
	}; \
	if [ -z "$(NO_UV)" ] && $(BIN)/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION) >/dev/null 2>&1 \
	        && uv_install -r requirements.lock && uv_install -e .; then \
	    echo "installed with uv $(UV_VERSION)"; \
	else \
	    [ -n "$(NO_UV)" ] || echo "uv $(UV_VERSION) unavailable or failed: installing with pip"; \
	    $(PIP_INSTALL) -r requirements.lock 2>&1 | { grep -v "^WARNING: Location" || true; }; \
	    $(PIP_INSTALL) -e . 2>&1 | { grep -v "^WARNING: Location" || true; }; \
	fi
	@touch $(STAMP)

install: $(STAMP)

book: install
	$(BIN)/minirepro book --scale book -j $$(nproc)

smoke: install
	$(BIN)/minirepro book --scale smoke -j $$(nproc)

# The unit tests with hypothesis derandomized (profile `ci`, tests/unit/conftest.py): every
# run draws the same examples; the 40 slowest tests are listed at the end.
unit: install
	HYPOTHESIS_PROFILE=ci $(BIN)/python -m pytest tests/unit -q -n 2 --dist worksteal --durations=40

# Whole systems, each run for real once (tests/integration, marked `integration`): toy books
# built serially and in parallel, the course pack built and graded by otter, sweeps on a
# Dask cluster, the replication protocol. --dist loadfile: each module's shared fixture
# (the pack, the class folder, the two toy-book builds) is built by one worker, once.
integration: install
	HYPOTHESIS_PROFILE=ci $(BIN)/python -m pytest tests/integration -q -n 2 --dist loadfile --durations=20

# Random search for new counterexamples (profile `dev`: 400 examples a property, a new seed
# each run unless HYPOTHESIS_SEED is set). A failure found here becomes an @example.
HYPOTHESIS_SEED ?=
fuzz: install
	HYPOTHESIS_PROFILE=dev $(BIN)/python -m pytest tests/unit -q -n 2 -m "not slow" -p no:cacheprovider \
	    $(if $(HYPOTHESIS_SEED),--hypothesis-seed=$(HYPOTHESIS_SEED)) \
	    $$(grep -l "@given" tests/unit/test_*.py)

NBVAL := -q -n 2 --dist loadfile --nbval-lax --nbval-sanitize-with tests/goldens/sanitize.cfg \
	--nbval-cell-timeout 300 --nbval-current-env -p no:cacheprovider

goldens-check: install
	$(BIN)/python -m pytest $(NBVAL) tests/goldens

# The smoke build's own executions (native kernels) against the goldens, cell by cell as
# nbval compares them and record by record (tests/built): `make test` executes each
# notebook once per kernel set instead of twice natively. Needs `make smoke` first.
goldens-built: install
	$(BIN)/python -m pytest tests/built -q -p no:cacheprovider

# The goldens again under a second kernel set (torch's portable kernels, MKL's
# reproducible mode) with an empty model cache: a golden that only one processor
# reproduces fails here, on any machine, before it can land.
goldens-portable: install
	@cache=$$(mktemp -d); trap 'rm -rf "$$cache"' EXIT; \
	echo "goldens under ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE, empty MINIREPRO_CACHE"; \
	ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE MINIREPRO_CACHE=$$cache \
	    $(BIN)/python -m pytest $(NBVAL) tests/goldens

# The smoke build read page by page in Debian's headless Chromium (tests/browser):
# MathJax, console errors, overflow, reprs, links, buttons; chapter screenshots in
# _build/smoke/screenshots/. Builds the smoke book first when there is none.
browser: install
	@test -f _build/smoke/_build/html/index.html || $(BIN)/minirepro book --scale smoke -j $$(nproc)
	MINIREPRO_BROWSER_REQUIRED=1 $(BIN)/python -m pytest tests/browser -q -p no:cacheprovider

# Every check, stage by stage (the install first: a no-op when pyproject.toml and the lock
# have not changed), then a table of each stage's wall time (_build/test-times.tsv);
# the first failing stage stops the run (its table still prints). The portable goldens and
# the browser check share the cores (the browser mostly waits on page loads): they run
# side by side, each with its own time and log, and both must pass.
TEST_STAGES := install unit integration smoke goldens-built portable+browser
test:
	@mkdir -p _build; times=_build/test-times.tsv; printf 'stage\tresult\tseconds\n' > $$times; \
	status=0; for stage in $(TEST_STAGES); do \
	    t0=$$(date +%s); \
	    if [ $$stage = portable+browser ]; then \
	        log=_build/goldens-portable.log; \
	        ( t1=$$(date +%s); if $(MAKE) --no-print-directory goldens-portable > $$log 2>&1; then r=passed; else r=FAILED; fi; \
	          printf '%s\t%s\t%s\n' goldens-portable $$r $$(( $$(date +%s) - t1 )) > _build/portable.tsv ) & pid=$$!; \
	        if $(MAKE) --no-print-directory browser; then rb=passed; else rb=FAILED; status=1; fi; \
	        printf '%s\t%s\t%s\n' browser $$rb $$(( $$(date +%s) - t0 )) >> $$times; \
	        wait $$pid || true; cat $$log; cat _build/portable.tsv >> $$times; \
	        grep -q passed _build/portable.tsv || status=1; \
	        printf '%s\t%s\t%s\n' "(portable+browser wall)" - $$(( $$(date +%s) - t0 )) >> $$times; \
	    else \
	        if $(MAKE) --no-print-directory $$stage; then r=passed; else r=FAILED; status=1; fi; \
	        printf '%s\t%s\t%s\n' $$stage $$r $$(( $$(date +%s) - t0 )) >> $$times; \
	    fi; \
	    [ $$status -eq 0 ] || break; \
	done; \
	echo; echo "make test, stage by stage (wall seconds):"; column -t -s "$$(printf '\t')" $$times; \
	awk -F '\t' 'NR > 1 && $$2 != "-" && $$1 != "browser" && $$1 != "goldens-portable" { s += $$3 } $$2 == "-" { s += $$3 } END { printf "total   %d s\n", s }' $$times; \
	if [ $$status -eq 0 ]; then echo "make test: all checks passed"; else exit 1; fi

goldens: install
	$(BIN)/minirepro goldens

ledger: install
	$(BIN)/minirepro claims --update

# Course labs (book/teaching.md): every student edition and autograder in _build/labs/;
# lab-report re-makes the guide's sample grade report (one real smoke-scale run).
labs: install
	$(BIN)/minirepro lab --all

lab-report: install
	$(BIN)/python -m minirepro.labs.sample

lint: install
	$(BIN)/ruff check src tests/unit tests/integration tests/fixtures.py

lock: install
	$(BIN)/python -m pip freeze --exclude-editable --disable-pip-version-check \
	    | sed -E 's/^torch==([0-9.]+)\+cpu$$/torch==\1/' | grep -v '^minirepro' > requirements.lock

clean:
	rm -rf _build runs $(VENV)
