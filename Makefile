# Thin front door: everything real lives in scripts/ and the testbed CLI.
SCENARIO ?= agents-vs-training
DURATION ?=
SEEDS ?=
OUT ?=
VARIANT ?=
LAB ?=
VM_TESTS ?=
BENCH ?=
ARCH ?= amd64
VENV := .venv
TESTBED := $(VENV)/bin/testbed

RESULTS ?= results/latest
UNIT_TESTS := $(VENV)/bin/python -m pytest -n auto --ignore=tests/integration --ignore=tests/agents
# the integration tests in two passes, both always run: those that assert what a run does,
# not how fast (marker shares_host), three at a time, a file per worker (on 2 cores their
# waits overlap); then those that measure, one at a time, on a quiet host. A test of
# either pass that failed runs once more, alone, after both (pytest's cache holds both
# passes' failures): a test that fails twice fails the target; both results are printed
INTEGRATION := tests/integration tests/agents
INTEGRATION_TESTS := $(VENV)/bin/python -m pytest -m shares_host -n 3 --dist loadfile \
	$(INTEGRATION); shared=$$?; \
	$(VENV)/bin/python -m pytest -m "not shares_host" $(INTEGRATION); alone=$$?; \
	if [ $$shared -eq 1 ] || [ $$alone -eq 1 ]; then \
	echo "--- the tests above that failed, once more, alone"; \
	$(VENV)/bin/python -m pytest --last-failed --last-failed-no-failures none $(INTEGRATION); \
	again=$$?; [ $$shared -ne 1 ] || shared=$$again; [ $$alone -ne 1 ] || alone=$$again; fi; \
	[ $$shared -eq 0 ] && [ $$alone -eq 0 ]

.PHONY: setup setup-dev figures run-scenario test test-units test-integration bench clean doctor validate lint docs up down check vm vm-test vm-bench vagrant-test cluster-test screenshots image image-test image-sizes

setup:
	@./scripts/setup.sh

# setup, and what the project's own tests need beyond it (scripts/packages-dev.txt)
setup-dev:
	@./scripts/setup.sh --dev

run-scenario: setup
	$(TESTBED) run $(SCENARIO) $(if $(DURATION),--duration $(DURATION)) $(if $(SEEDS),--seeds $(SEEDS)) $(if $(VARIANT),--variant $(VARIANT)) $(if $(OUT),--out $(OUT))

up: setup
	$(TESTBED) up $(SCENARIO) $(if $(VARIANT),--variant $(VARIANT)) $(if $(LAB),--name $(LAB))

down:
	@test -n "$(LAB)" || { echo "make down LAB=name (see: $(TESTBED) ls)"; exit 2; }
	$(TESTBED) down $(LAB)

# Grade a results folder against a lab guide (labs/): make check LAB=1 RESULTS=dir
check: setup
	@test -n "$(LAB)" || { echo "make check LAB=number RESULTS=dir (labs: labs/README.md)"; exit 2; }
	$(TESTBED) check $(LAB) $(RESULTS) $(if $(STUDENT),--student $(STUDENT))

# The unit tests and doctests on every CPU (pytest-xdist), then the tests that build real
# networks: three at a time those that only assert what a run does, then one at a time
# those that measure (a run that shares the host with another is not a measurement);
# both always run, and either one failing fails the target. Each half alone:
# make test-units, make test-integration
test: setup-dev
	$(UNIT_TESTS); units=$$?; $(INTEGRATION_TESTS); labs=$$?; \
	[ $$units -eq 0 ] && [ $$labs -eq 0 ]

test-units: setup-dev
	$(UNIT_TESTS)

test-integration: setup-dev
	$(INTEGRATION_TESTS)

bench: setup
	$(VENV)/bin/python -m bench $(BENCH)

doctor: setup
	$(TESTBED) doctor

validate: setup
	$(TESTBED) validate scenarios/$(SCENARIO).yaml

lint: setup
	$(VENV)/bin/ruff check .

# Each lesson page's key figure, from a real run (docs/img/runs/; refuses flagged runs)
figures: setup
	$(VENV)/bin/python scripts/lesson_figures.py $(FIGURES)

# The dashboard's screenshots on docs/watching.md, taken by its browser test from a running lab
screenshots: setup-dev
	TESTBED_SCREENSHOTS=docs/img/watching $(VENV)/bin/python -m pytest -q \
		tests/integration/test_monitor.py -k watched

# The docs site into site/ (strict: a warning or a broken link fails the build)
# as an ordinary user: no root, no lab set up. The references are generated from the code
# (scripts/docs_hooks.py), so MkDocs needs the project importable: the lab's venv when it
# has MkDocs (make setup-dev), otherwise a venv of its own (.venv-docs, pip only).
DOCS_VENV := $(if $(wildcard $(VENV)/bin/mkdocs),$(VENV),.venv-docs)
docs: $(DOCS_VENV)/bin/mkdocs
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict

.venv-docs/bin/mkdocs:
	python3 -m venv .venv-docs
	.venv-docs/bin/pip install -q -e '.[docs]'

clean:
	@if [ -x $(TESTBED) ]; then $(TESTBED) clean; \
	else echo "no .venv: no testbed run can have left anything behind"; fi

# The lab VM booted here under qemu (scripts/vm/): Debian 12's stock kernel, so the OVS
# kernel datapath, kernel MACsec, RED and netem exist. The image is built once per hash of
# its inputs into /var/cache/testbed-vm/.
vm:
	@./scripts/vm/boot.sh

vm-test:
	@./scripts/vm/test.sh $(VM_TESTS)

# A lab over two machines, tested on two lab VMs joined by a wire (scripts/vm/cluster.sh):
# make cluster-test [CLUSTER_TESTS="tests/cluster -k killed"]
cluster-test:
	@./scripts/vm/cluster.sh $(CLUSTER_TESTS)

# The benches that need the full kernel, in the lab VM: make vm-bench [BENCH="datapath dctcp"]
vm-bench:
	@./scripts/vm/bench.sh $(or $(BENCH),datapath dctcp)

# The Vagrant route, end to end, under libvirt (scripts/vagrant/test.sh): the lab's box
# built from Debian 12's packages, vagrant up from a clean clone, the default scenario
# and doctor inside, the results on the host, nothing of it left in libvirt afterwards
vagrant-test:
	@./scripts/vagrant/test.sh

# The lab VM as files a teacher hands out (scripts/image/): make image ARCH=amd64|arm64
# writes dist/testbed-lab-ARCH.{qcow2,ova,vhdx}, its Vagrant boxes and SHA256SUMS
image:
	@./scripts/image/build.sh $(ARCH)

# The images booted here under qemu as a student's VM program would: ssh login, the default
# scenario inside, the results back (scripts/image/test.sh; results/image-test/)
image-test:
	@./scripts/image/test.sh $(ARCH)

# The same, and each lab's starter run measured inside the VM (docs/install/sizes.md)
image-sizes:
	@IMAGE_TEST_SIZES="$(or $(LABS),all)" ./scripts/image/test.sh $(ARCH)
