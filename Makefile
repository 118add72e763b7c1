# The two commands of the README:
#   make book   creates .venv, installs, executes every chapter and builds the HTML book
#   make test   creates .venv, installs, runs every test (unit, notebooks, book, browser, grading);
#               each chapter is executed once, by nbval on the Colab-like kernel, and that run
#               serves the Colab-like checks and the book build too (tools/book/nbrecord.py)
# XFL_FAST=1 selects the fast profile (seconds per chapter on a CPU); `make test` always sets it.
# `make book` runs the full profile where nvidia-smi finds a GPU, the fast one elsewhere;
# XFL_FAST=0 or XFL_FAST=1 on the command line overrides that choice; XFL_PROFILE=cpu runs the
# chapters without stored outputs in the cpu profile (about 10 min per training chapter on 2 cores).
# Without npm, `make book` still builds, loading MathJax and the widget scripts from their CDNs.

PYTHON  ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
VENDOR  := book/vendor/.stamp
CHAPTERS_MD := $(filter-out %/exercises.md,$(wildcard chapters/*/*.md))
EXERCISES   := $(wildcard chapters/*/exercises.md)
CHAPTER     ?= ch01_qkv
SUBMISSIONS ?= submissions/$(CHAPTER)
TIMEOUT     ?= 60
JOBS    ?= 2
# A hung cell fails after this many seconds (the longest fast-profile cell takes ~155 s on 2 cores;
# _config.yml holds the same value for the book build, tools/book/config.py the full profile's).
CELL_TIMEOUT := 600
NPM     := $(shell command -v npm 2>/dev/null)
ASSETS  := $(if $(NPM),vendor,cdn)
XFL_FAST ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 0 || echo 1)
PROFILE_ENV := $(if $(XFL_PROFILE),XFL_PROFILE=$(XFL_PROFILE) XFL_FAST=,XFL_FAST=$(XFL_FAST))

RUN_DIR := _build/test-run
.PHONY: book test test-setup colab-base colab-env sync vendor browser-deps grade-deps sandbox-deps exercises exercise-pages release gradescope grade written merge-written feedback bench-translate bench-timings bench-vit bench-bpe bench-decode bench-generate-hf bench-modern clean

# Bytecode is written by the first process that imports a module, not by pip: compiling all of an
# environment's 16,000 modules costs about 50 s of CPU, and the tests import a fraction of them.
# These machines set PYTHONDONTWRITEBYTECODE=1; with it and --no-compile, every process compiled
# torch from source again (tried 2026-11-27: CI took 1338 s instead of about 950 s), hence:
unexport PYTHONDONTWRITEBYTECODE
$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --no-compile --upgrade pip
	$(BIN)/python -m pip install -q --no-compile -r requirements-dev.txt -e .
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

# bubblewrap, the sandbox each graded notebook runs in (tools/grading/sandbox.py), from Debian's packages:
# all that grading needs beyond .venv (Linux; no browser, no npm). On another system it stops and
# says how to grade safely. sandbox-deps (for make test) installs it after browser-deps: under
# `make -j` two apt-get runs would fight over dpkg's lock.
grade-deps:
	@[ "$$(uname -s)" = Linux ] || { echo "make grade needs Linux with bubblewrap (bwrap): each notebook runs in \
	a bubblewrap sandbox, and this is $$(uname -s). Grade inside a Linux virtual machine or container, or, \
	for notebooks you trust only, run .venv/bin/python -m tools.grading ZIP FOLDER --unsandboxed \
	(see book/instructors.md)." >&2; exit 2; }
	@command -v bwrap >/dev/null || { command -v apt-get >/dev/null || { echo "make grade needs \
	bubblewrap (bwrap): install it with your system's package manager" >&2; exit 2; }; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q bubblewrap; }
sandbox-deps: browser-deps
	@$(MAKE) --no-print-directory grade-deps

# Student notebooks, autograder zips, solutions -> _build/exercises/ (fails if a solution misses a
# point). `make test` passes ASSIGN_FLAGS=--no-run-tests: its tests grade every solution with the
# real grader (tests/test_exercises.py), a stricter check than otter's, so otter's is not run twice.
ASSIGN_FLAGS ?=
_build/exercises/.stamp: $(STAMP) $(EXERCISES) $(wildcard tools/grading/*.py)
	$(BIN)/python -m tools.grading.exercises build $(ASSIGN_FLAGS)
	touch $@
exercises: _build/exercises/.stamp

# The book's exercise pages (no solutions), generated from the student notebooks
book/exercises/.stamp: _build/exercises/.stamp
	$(BIN)/python -m tools.grading.exercises pages
	touch $@
exercise-pages: book/exercises/.stamp

# One chapter's student notebook, autograder zip and solutions (make release CHAPTER=ch01_qkv).
_build/exercises/autograder/%-autograder.zip: chapters/%/exercises.md $(STAMP) $(wildcard tools/grading/*.py)
	$(BIN)/python -m tools.grading.exercises build --out _build/exercises $(ASSIGN_FLAGS) $*
release: _build/exercises/autograder/$(CHAPTER)-autograder.zip
	@echo "Hand out _build/exercises/student/$(CHAPTER)_exercises.ipynb; keep the zip and the solutions private."

# The chapter's autograder for Gradescope (book/instructors.md) -> _build/gradescope/$(CHAPTER)-gradescope.zip
gradescope: _build/exercises/autograder/$(CHAPTER)-autograder.zip
	$(BIN)/python -m tools.grading.gradescope build $(CHAPTER) --timeout $(TIMEOUT)

# The instructor's path (book/instructors.md), one chapter at a time:
#   make grade CHAPTER=ch01_qkv   submissions/ch01_qkv/<student>.ipynb -> grades/ch01_qkv.csv, .json, -feedback/
#     [ROSTER=roster.csv DUE=<ISO time> LATE_PENALTY=<% per day> CUTOFF_DAYS=<n> TIMES=times.csv LMS_ASSIGNMENT=<name>]
#     the roster, deadlines and the LMS's gradebook imports (tools/grading/roster.py)
#   make written CHAPTER=ch01_qkv        written answers -> grades/ch01_qkv-written.csv (fill in its points)
#   make merge-written CHAPTER=ch01_qkv  their points -> grades/ch01_qkv.csv (total = the whole grade)
#   make feedback CHAPTER=ch01_qkv [REVEAL=1]  feedback files again, with written points (REVEAL: hidden tests' messages)
GRADES ?= grades
grade: _build/exercises/autograder/$(CHAPTER)-autograder.zip grade-deps
	@echo "Grading $(SUBMISSIONS)/ in bubblewrap sandboxes (Linux with bwrap: $$(command -v bwrap))"
	$(BIN)/python -m tools.grading $< $(SUBMISSIONS) -o $(GRADES)/$(CHAPTER).csv --timeout $(TIMEOUT) --jobs $(JOBS) \
	  $(if $(ROSTER),--roster '$(ROSTER)') $(if $(DUE),--due '$(DUE)') $(if $(LATE_PENALTY),--late-penalty $(LATE_PENALTY)) \
	  $(if $(CUTOFF_DAYS),--cutoff-days $(CUTOFF_DAYS)) $(if $(TIMES),--times '$(TIMES)') \
	  $(if $(LMS_ASSIGNMENT),--lms-assignment '$(LMS_ASSIGNMENT)')
written: $(STAMP)
	$(BIN)/python -m tools.grading.written export $(CHAPTER) $(SUBMISSIONS) -o $(GRADES)/$(CHAPTER)-written.csv
merge-written: $(STAMP)
	$(BIN)/python -m tools.grading.written merge $(GRADES)/$(CHAPTER)-written.csv $(GRADES)/$(CHAPTER).csv
feedback: $(STAMP)
	$(BIN)/python -m tools.grading.feedback $(GRADES)/$(CHAPTER).json $(if $(REVEAL),--reveal-hidden) \
	  $(if $(wildcard $(GRADES)/$(CHAPTER)-written.csv),--written $(GRADES)/$(CHAPTER)-written.csv)

sync: $(STAMP)
	$(BIN)/jupytext --sync $(CHAPTERS_MD)

# --all: every page is read and executed again. Without it, a build after a failed one (no data
# mirror offline, say) re-read only changed pages and passed, rendering the old errors.
book: $(STAMP) $(if $(NPM),$(VENDOR)) exercise-pages
	@$(if $(NPM),,echo "npm not found: the book will load MathJax and the widget scripts from their CDNs (online only).")
	$(PROFILE_ENV) $(BIN)/python -m tools.book.config --assets $(ASSETS) -o _build/book_config.yml
	$(PROFILE_ENV) $(BIN)/jupyter-book build -W -n --keep-going --all --config _build/book_config.yml .
	@echo "The book is built. Open it in a browser: file://$(CURDIR)/_build/html/index.html"

# Every chapter under nbval on this machine's CUDA GPU (a workstation's, a rented one): the GPU's
# own precision (bf16 + compile from capability 8.0), and the training chapters again in fp16, the
# path of Colab's T4. Prints a table per chapter (passed, seconds, peak GPU memory) and merges the
# results into $(GPU_RESULTS); without CUDA it says so and fails. The GPU queue's gpu_check step
# runs the same command (tools/env/gpu_plan.py). E.g. make test-gpu GPU_FLAGS="--jobs 2 ch07_vit".
GPU_RESULTS ?= _build/test-gpu/gpu_nbval.json
GPU_FLAGS   ?=
.PHONY: test-gpu
test-gpu: $(STAMP)
	$(BIN)/python -m tools.env.gpu_chapters check --t4-path --out $(GPU_RESULTS) $(GPU_FLAGS)

# Wheels the lent GPU machine lacks (its Python 3.12, no internet) -> build/wheels/; see DEVELOPERS.md
.PHONY: device-wheels
device-wheels: $(STAMP)
	$(BIN)/python -m tools.env.device_wheels

# The GPU queue (DEVELOPERS.md): stage the data and print the next window's calls; on the GPU
# machine, where $$OUT is set, run one window; back here, record what it returned.
.PHONY: gpu-next gpu-window gpu-record
gpu-next: $(STAMP)
	$(BIN)/python -m tools.env.gpu_plan stage
	$(BIN)/python -m tools.env.gpu_plan next
gpu-window:
	python3 -m tools.env.gpu_plan window --out $(OUT)
gpu-record: $(STAMP)
	$(BIN)/python -m tools.env.gpu_plan record $(FILES)

# The Colab-like environment (.venv-colab, kept between runs) with this checkout's xfl installed
# as the chapters' first cell installs it, registered as the kernel xfl-colab-like in $(RUN_DIR).
# Colab's packages at Colab's versions (tools/env/colab-runtime.txt, torch 2.11 included, a second
# torch download), built beside .venv (the system Python runs it); xfl last, after .venv (two
# builds of xfl in one tree would collide).
colab-base:
	$(PYTHON) -m tools.env.colab_env
colab-env: $(STAMP) colab-base
	$(PYTHON) -m tools.env.colab_env prepare

# What the published install cells would do on Colab's runtimes, today's and older ones (pip's dry
# run against each vendored freeze and its Python) -> bench/results/colab_old_runtimes.json; then,
# on each older runtime with today's torch (2026.07), xfl's import, its banner and chapter 1 in the
# fast profile, its other releases layered over .venv-colab -> bench/results/colab_old_run.json
.PHONY: colab-old-check
colab-old-check: $(STAMP) colab-base
	$(BIN)/python -m tools.env.colab_env old-runtimes
	$(BIN)/python -m tools.env.colab_old

# Everything the tests need, built side by side: both environments, npm, Chromium, exercises.
# colab-base comes first in the list, so that under -j its download starts beside .venv's.
test-setup: colab-base $(STAMP) $(VENDOR) exercise-pages browser-deps sandbox-deps colab-env

# nbval runs each chapter once, on the Colab-like kernel, and records it under $(RUN_DIR)/executed;
# the Colab-like checks and the book build read those records (tools/book/nbrecord.py). Longest
# chapters first, then the book's checks, then the rest (tools/book/run_order.py).
test:
	$(MAKE) -j4 --output-sync=target test-setup ASSIGN_FLAGS=--no-run-tests
	XFL_FAST=1 OMP_NUM_THREADS=1 JUPYTER_PATH=$(CURDIR)/$(RUN_DIR)/jupyter $(BIN)/python -m pytest \
	  -n $(JOBS) --dist loadfile -p tools.book.nbrecord --xfl-record $(RUN_DIR)/executed \
	  --nbval-kernel-name xfl-colab-like tests --nbval-lax --nbval-cell-timeout=$(CELL_TIMEOUT) \
	  chapters -p no:cacheprovider --durations=25

# Benchmarks: train within a fixed time budget (meant for a GPU), or time on the CPU
# (bench-timings); each writes bench/results/*.json
bench-translate: $(STAMP)
	$(BIN)/python -m bench.translate

bench-timings: $(STAMP)
	$(BIN)/python -m bench.translate --timings-only

bench-vit: $(STAMP)
	$(BIN)/python -m bench.vit

bench-bpe: $(STAMP)
	$(BIN)/python -m bench.bpe --subword-nmt

bench-decode: $(STAMP)
	$(BIN)/python -m bench.decode

# xfl's greedy generation vs Hugging Face's GPT-2 generate, one thread (needs transformers)
bench-generate-hf: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m bench.generate_hf

bench-modern: $(STAMP)
	$(BIN)/python -m bench.modern

clean:
	rm -rf _build book/vendor book/js/node_modules book/exercises
