# logkeeper — every target installs what it needs into .venv (safe to rerun).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# After each editable install: the install's import hook costs ~20 ms at every interpreter start
# (measured with -X importtime); a .pth naming the two source folders imports the same modules
# without it.
PLAIN_PTH = $(PY) -c 'import glob, sysconfig; [open(p, "w").write("$(CURDIR)/sidecar\n$(CURDIR)/operator\n") for p in glob.glob(sysconfig.get_paths()["purelib"] + "/__editable__.logkeeper-*.pth")]'
export NUMBA_CACHE_DIR := $(CURDIR)/.cache/numba
# An editable install of two source folders makes setuptools print a 9-line notice about folders
# that could shadow the package (its import hook; PLAIN_PTH above replaces that hook anyway).
EDITABLE := PYTHONWARNINGS=ignore::UserWarning:setuptools.command.editable_wheel
PYTEST_ARGS ?=

.PHONY: setup compile constraints demo test unit lint bench bench-kafka bench-spark kcat fuse crash interop spark e2e e2e-needs-root kind-e2e crds chart clean

setup: $(STAMP) compile

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(EDITABLE) $(PY) -m pip install -q -c constraints.txt -e '.[dev,operator]'
	@$(PLAIN_PTH)
	@touch $@

# The kernels compiled ahead of time (sidecar/logkeeper/aot: a process then imports no numba;
# rebuilt, 30-60 s, only when a kernel's source changed) and the modules' bytecode (an editable
# install has none, and PYTHONDONTWRITEBYTECODE=1 would have every process compile every module).
compile: $(STAMP)
	@$(PY) -m logkeeper.aot.build
	@$(PY) -m compileall -q sidecar operator >/dev/null

# Re-pin constraints.txt to what the venv holds now (after testing a refresh).
constraints:
	@{ sed -n '1,3p' constraints.txt; $(PY) -m pip freeze --exclude-editable | grep -v '^-e'; } > constraints.txt.new
	@mv constraints.txt.new constraints.txt

demo: setup
	$(PY) -m logkeeper.demo --dir ./demo-data

lint: setup
	$(VENV)/bin/ruff check sidecar operator tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache --no-logo

# kcat (Debian's package, unpacked into .cache/kcat) for the Kafka listener tests; cached.
kcat:
	@bash interop/fetch_kcat.sh >/dev/null

# libfuse3 and fusermount3 (Debian's fuse3) for the power-cut tests' FUSE file system
# (tests/crash/powercut_fs.py), installed when missing and we are root; without them those tests
# say why they skip (make crash fails instead).
fuse:
	@ldconfig -p | grep -q 'libfuse3\.so\.3' && command -v fusermount3 >/dev/null || \
		{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 libfuse3-3; } >/dev/null; } || \
		echo "make fuse: libfuse3/fusermount3 missing and not installable here: the power-cut tests skip"

# The default suite: unit, behaviour, interop with kafka-python, confluent-kafka and kcat against
# the Kafka listener, crash tests (bounded: 200 SIGKILLs, 20 power cuts; make crash runs 2000 and 1000).
test: setup lint kcat fuse
	$(PY) -m pytest -q -n 2 tests/unit tests/behaviour tests/interop tests/crash $(PYTEST_ARGS)

unit: setup
	$(PY) -m pytest -q tests/unit $(PYTEST_ARGS)

# 2000 SIGKILLs (tests/crash/test_manager_sigkill.py) and 1000 power cuts on a FUSE file system that
# keeps only what was fsynced (tests/crash/test_power_cut.py; needs /dev/fuse and libfuse3: Debian's
# fuse3 is installed here when missing and we are root); the figures are printed at the end. A failing
# cut's disk images stay in .cache/crash-tmp (LOGKEEPER_CRASH_KEEP: and the child's messages).
CRASH_REPORT := .cache/crash-report.txt
crash: setup fuse
	@mkdir -p .cache && rm -f $(CRASH_REPORT)
	LOGKEEPER_CRASH_ITERATIONS=2000 LOGKEEPER_POWER_CUTS=1000 LOGKEEPER_REQUIRE_FUSE=1 LOGKEEPER_CRASH_KEEP=1 \
		LOGKEEPER_CRASH_REPORT=$(CRASH_REPORT) $(PY) -m pytest -q --basetemp=.cache/crash-tmp tests/crash \
		$(PYTEST_ARGS); rc=$$?; \
		echo "make crash figures:"; cat $(CRASH_REPORT) 2>/dev/null; exit $$rc

# Interop with a real Kafka (issue 5): Kafka's jars from Maven Central into .cache/kafka-<version>
# (interop/fetch_kafka.sh; reruns use the cache), then the four steps of tests/kafka, one at a time:
# 1 DumpLogSegments on logkeeper's segments, 2 logkeeper reads a broker's log, 3 a broker serves
# logkeeper's, 4 both cleaners side by side (table in bench/results/kafka_side_by_side.md).
# KAFKA_VERSION=4.x.y picks another release than interop/pom.xml's.
KAFKA_VERSION ?=
interop: setup
	@KAFKA_VERSION=$(KAFKA_VERSION) bash interop/fetch_kafka.sh >/dev/null
	@KAFKA_VERSION=$(KAFKA_VERSION) $(PY) -m pytest -v -p no:cacheprovider tests/kafka $(PYTEST_ARGS) || \
		{ echo "make interop: FAILED (each failure above names its step: 'step N: ...')"; exit 1; }
	@sed -n '/^| cleaner/,/^$$/p' bench/results/kafka_side_by_side.md

# The real Spark job (issues 7, 21) with the spark extra: its output byte-identical to the
# in-process cleaner's on random workloads (local[2]), the sidecar's hand-off with the embedded job,
# kills of the real job and of the sidecar while it runs, and a real standalone cluster (a master
# and two workers from pyspark's spark-class on 127.0.0.1, stopped by PID at the end): relative
# paths, byte-identical output, an executor SIGKILLed mid-job, failure.json (tests/spark).
spark: setup
	@$(EDITABLE) $(VENV)/bin/pip install -q -c constraints.txt -e '.[dev,operator,spark]'
	@$(PLAIN_PTH)
	$(PY) -m pytest -q tests/spark $(PYTEST_ARGS)

# The CRDs (crds/) and the chart's generated parts (its crds/ copy, values.schema.json), written
# from the settings' single definitions; `make chart` also checks that they agree and lints the chart.
crds: setup
	$(PY) -m logkeeper_operator.crdgen crds

chart: crds
	$(PY) -m logkeeper_operator.chartgen charts/logkeeper
	$(PY) -m logkeeper_operator.crdgen --check crds charts/logkeeper/crds
	@if [ -x "$$(sed -n 's/^HELM=//p' $(E2E_CACHE)/tools.env 2>/dev/null)" ]; then \
		"$$(sed -n 's/^HELM=//p' $(E2E_CACHE)/tools.env)" lint --strict charts/logkeeper; \
	else echo "make chart: helm not built yet (make e2e builds it); skipped helm lint"; fi

# End to end on a real one-node cluster, as users run logkeeper (e2e/README.md). Needs root. Builds
# what it needs, each cached (reruns take seconds): our image (make image, .cache/image), the control
# plane and helm (e2e/tools.sh) and the node - kubelet, kube-scheduler, kube-proxy, containerd, CNI
# plugins, crictl, a pause image (e2e/node_tools.sh) - in $(E2E_CACHE). Then tests/e2e starts etcd,
# kube-apiserver, kube-controller-manager, containerd (Debian's runc), the CNI bridge, kubelet,
# kube-scheduler and kube-proxy, imports the image, and runs the user's steps: kubectl apply -f crds/,
# helm install (the operator in-cluster), a LogVolume on static local PVs, records through its
# Service, an offload Job running spark-compact in our image, a killed container, a deleted pod,
# deletion and helm uninstall. Prints every component's version and the image digest; on a failed
# step the pods' events and logs. Then the API-server tests of tests/behaviour, which make test skips
# on a machine where this target has not built kube-apiserver and etcd yet. kind-e2e: the same user steps on a kind cluster (needs Docker).
E2E_CACHE ?= $(HOME)/.cache/logkeeper/e2e
E2E_STAMP := $(VENV)/.installed-e2e
e2e: e2e-needs-root setup $(E2E_STAMP)
	@$(MAKE) --no-print-directory image
	@start=$$(date +%s); LOGKEEPER_E2E_CACHE=$(E2E_CACHE) LOGKEEPER_E2E_NODE=1 bash e2e/tools.sh >/dev/null; \
		echo "make e2e: tools ready in $$(( $$(date +%s) - start )) s ($(E2E_CACHE))"
	LOGKEEPER_E2E_TOOLS=$(E2E_CACHE)/tools.env LOGKEEPER_E2E_NODE_TOOLS=$(E2E_CACHE)/node-tools.env \
		LOGKEEPER_IMAGE_ENV=.cache/image/image.env $(PY) -m pytest -v -s -p no:cacheprovider -p no:randomly \
		--timeout 1800 tests/e2e tests/behaviour/test_operator_apiserver.py $(PYTEST_ARGS)

# the e2e extra (kubectl), installed again only when the pins change
$(E2E_STAMP): $(STAMP)
	@$(EDITABLE) $(VENV)/bin/pip install -q -c constraints.txt -e '.[dev,operator,e2e]'
	@$(PLAIN_PTH)
	@touch $@

e2e-needs-root:
	@[ "$$(id -u)" = 0 ] || { echo "make e2e: needs root (it runs containerd, runc and kubelet; make image runs mmdebstrap and chroot): run it as root" >&2; exit 1; }

kind-e2e:
	bash e2e/kind-e2e.sh

# The logkeeper image without a daemon (issue 18): image/build.sh builds image/recipe.env's image (the
# Dockerfile is generated from the same recipe) from Debian packages (mmdebstrap) and the pinned
# wheels, as an OCI archive in .cache/image for `ctr images import`; each layer is cached, a new
# digest is run under runc (uid 10001, read-only root). Prints the digest and the size. Needs root.
# IMAGE_CHECK_DOCKERFILE=1 also builds the Dockerfile with buildah and compares the two images.
.PHONY: image
image:
	nice bash image/build.sh

# Every in-process benchmark (about 9 min on 2 cores as root, which adds cold start-up rows); each
# writes its table to bench/results/.
# bench-kafka (a real broker) and the Spark benchmark have their own targets.
bench: setup
	$(PY) bench/bench_walk.py
	$(PY) bench/bench_log.py
	$(PY) bench/bench_cleaner.py
	$(PY) bench/bench_startup.py $(if $(filter 0,$(shell id -u)),--cold)  # cold rows need root (drop_caches)
	$(PY) bench/bench_snapshot_load.py
	$(PY) bench/bench_sidecar_load.py
	$(PY) bench/bench_unlink.py  # loop-device ext4 rows need root

# logkeeper side by side with a real Kafka (make interop's release, fetched with kafka-tools):
# Kafka's own ProducerPerformance/ConsumerPerformance against the sidecar's Kafka listener and a
# KRaft broker (bench/results/kafka_perf.md; again with each server on a core of its own and the
# tools on the other: kafka_perf_pinned.md; the default-batch producer cases again with the
# tool's JIT warmed by a first pass in its JVM: kafka_perf_warm.md; with each server and the tools
# in a cpu cgroup of their own, as a pod's containers are, as root: kafka_perf_cgroups.md, and with the
# tool's JIT warm too: kafka_perf_warm_cgroups.md), raw 1 MiB Fetch and Produce
# requests and 16 KiB Produce requests from one socket against both (kafka_raw.md: the server's
# side, no Java client in the way), then both log
# cleaners on the same >= 1 GiB uncompressed log in 1 MiB and 100 MiB segments (kafka_cleaner.md),
# then on make interop's mixed-codec log (its step 4: kafka_side_by_side.md) with the codec-bound
# ceiling of that log beside it (codec_ceiling.md).
# Each comparison prints 'side-by-side <case>: logkeeper <x> MB/s, kafka <y> MB/s, ratio <r>x'.
# About 25-35 min on 2 cores as root: 23 min on a quiet host (2026-12-01, 01:43-02:05) before the
# --warm-tool --cgroups run was added, which takes about 4 min.
# (bench/bench_kafka_clients.py: one Python client loop against both, kafka_clients.md.)
bench-kafka: setup
	@KAFKA_VERSION=$(KAFKA_VERSION) bash interop/fetch_kafka.sh >/dev/null
	$(PY) bench/bench_kafka_perf.py
	$(PY) bench/bench_kafka_perf.py --pin
	$(PY) bench/bench_kafka_perf.py --warm-tool
	$(if $(filter 0,$(shell id -u)),$(PY) bench/bench_kafka_perf.py --cgroups,@echo "bench-kafka: kafka_perf_cgroups.md not refreshed: cpu cgroups need root")
	$(if $(filter 0,$(shell id -u)),$(PY) bench/bench_kafka_perf.py --warm-tool --cgroups,@echo "bench-kafka: kafka_perf_warm_cgroups.md not refreshed: cpu cgroups need root")
	$(PY) bench/bench_kafka_raw.py
	$(PY) bench/bench_kafka_cleaner.py
	KAFKA_VERSION=$(KAFKA_VERSION) $(PY) -m pytest -q -s -p no:cacheprovider tests/kafka/test_step4_side_by_side.py
	$(PY) bench/bench_codec_ceiling.py

# The Spark compaction job (local[1], local[2], a standalone cluster of 2 one-core workers) vs
# `logkeeper clean` (128 MiB and 2 GiB dedupe buffers) on backlogs of 1M, 4M, 10M distinct keys
# (scratch ~3x the largest in $$TMPDIR): bench/results/spark.md and spark.svg (about 5 min on 2 cores).
# BENCH_SPARK_ARGS="--keys 1M,4M,10M,40M" for other sizes.
BENCH_SPARK_ARGS ?=
bench-spark: setup
	@$(EDITABLE) $(VENV)/bin/pip install -q -c constraints.txt -e '.[dev,operator,spark]'
	@$(PLAIN_PTH)
	BENCH_VIA_MAKE=1 $(PY) bench/bench_spark.py $(BENCH_SPARK_ARGS)

clean:
	rm -rf $(VENV) .cache demo-data .pytest_cache .mypy_cache .ruff_cache
