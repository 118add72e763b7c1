# The two commands of the README:
#   make book   creates .venv, installs, executes every chapter and builds the HTML book
#   make test   creates .venv, installs, runs every test (unit, notebooks, book, browser, grading)
# XFL_FAST=1 selects the fast profile (seconds per chapter on a CPU); `make test` always sets it.

PYTHON  ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
VENDOR  := book/vendor/.stamp
CHAPTERS_MD := $(wildcard chapters/*/*.md)
JOBS    ?= 2

.PHONY: book test unit notebooks sync vendor browser-deps clean

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements-dev.txt -e .
	touch $@

# MathJax, RequireJS and the widget manager are served by the book itself (offline).
$(VENDOR): book/js/package.json book/js/package-lock.json
	cd book/js && npm ci --no-audit --no-fund --ignore-scripts
	rm -rf book/vendor && mkdir -p book/vendor
	cp -r book/js/node_modules/mathjax/es5 book/vendor/mathjax
	cp -r book/js/node_modules/@jupyter-widgets/html-manager/dist/. book/vendor/
	cp book/js/node_modules/requirejs/require.js book/vendor/require.js
	touch $@

vendor: $(VENDOR)

# Chromium for the browser test, from Debian's packages (needs root or sudo).
browser-deps:
	@command -v chromium >/dev/null || { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium; }

sync: $(STAMP)
	$(BIN)/jupytext --sync $(CHAPTERS_MD)

book: $(STAMP) $(VENDOR)
	$(BIN)/jupyter-book build -W -n --keep-going .
	@echo "Open _build/html/index.html"

test: $(STAMP) $(VENDOR) browser-deps
	XFL_FAST=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(JOBS) --dist loadfile tests --nbval-lax chapters -p no:cacheprovider

clean:
	rm -rf _build book/vendor book/js/node_modules
