# qkern: thin wrapper over CMake. Two commands do all the set-up on a fresh Debian machine:
#   make demo   builds the library and the qk tool for this machine, runs the main job (qk demo)
#               and a quick norm bench (its summary; `qk bench norm` runs the full protocol)
#   make test   builds every target with gcc and clang under ASan+UBSan and runs every test
# Build outputs: build/libqkern.so, build/libqkern.a, build/qk (target: native).

SHELL := /bin/bash
JOBS ?= $(shell nproc)
TARGET ?= native
PREFIX ?= /usr/local
# Targets come from their CMake fragments (cmake/targets/<target>.cmake, each naming its
# architecture): the host's own run natively, the others' under qemu-user where a cross
# toolchain file exists (cmake/toolchains/<arch>.cmake).
HOST_ARCH := $(subst x86_64,x86,$(subst aarch64,arm,$(shell uname -m)))
targets_of = $(sort $(basename $(notdir $(shell grep -l '^set(QK_TARGET_ARCH $(1))' cmake/targets/*.cmake))))
TEST_TARGETS := generic $(call targets_of,$(HOST_ARCH))
CROSS_ARCHS := $(filter-out $(HOST_ARCH),$(basename $(notdir $(wildcard cmake/toolchains/*.cmake))))
TEST_COMPILERS := gcc clang
APT_PACKAGES := cmake make gcc clang libomp-dev libclang-rt-dev pkg-config libjansson-dev python3 python3-pip python3-venv python3-dev
# cross builds for arm on an x86 host: Debian's gcc, the arm64 jansson (multiarch) and qemu-user
CROSS_APT_arm := gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user libjansson-dev:arm64 libgomp1:arm64 libubsan1:arm64
# torch from PyPI (with its CUDA libraries) installs in about 2 minutes on a fresh machine
PIP_PACKAGES := numpy ml_dtypes safetensors pytest torch scikit-build-core
PYVENV := build/pyvenv

.PHONY: all build demo test test-cross cross-deps deps pydeps pyinstall install fuzz bench bench-deps clean

all: build

# ---- set-up: install what is missing (Debian packages, then PyPI packages) ----
deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make: installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

# (the package list is expanded by make, per architecture, before the shell runs)
CROSS_APT := $(foreach a,$(CROSS_ARCHS),$(CROSS_APT_$(a)))
cross-deps: deps
	@missing=""; for p in $(CROSS_APT); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make: installing for the cross builds ($(CROSS_ARCHS)):$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  case "$$missing" in *:arm64*) $$SUDO dpkg --add-architecture arm64;; esac; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	@for a in $(CROSS_ARCHS); do command -v $$(sed -n 's/^set(CMAKE_C_COMPILER \([^ )]*\).*/\1/p' cmake/toolchains/$$a.cmake) >/dev/null || \
	  { echo "make: the $$a cross compiler named in cmake/toolchains/$$a.cmake is not on PATH after set-up" >&2; exit 1; }; done

pydeps: deps
	@python3 -c "import numpy, ml_dtypes, safetensors, pytest, torch, scikit_build_core" 2>/dev/null || \
	  python3 -m pip install -q $(PIP_PACKAGES) || \
	  python3 -m pip install -q --break-system-packages $(PIP_PACKAGES)

# ---- the optimised build for this machine ----
build: deps
	cmake -S . -B build -DQK_TARGET=$(TARGET) -DCMAKE_BUILD_TYPE=Release
	cmake --build build -j $(JOBS)

demo: build
	./build/qk info
	./build/qk demo
	./build/qk bench norm --quick

# ---- every test: 3 targets x 2 compilers under ASan+UBSan, then the release build ----
test: pydeps
	@set -e; for cc in $(TEST_COMPILERS); do for t in $(TEST_TARGETS); do \
	  d=build-test/$$cc-$$t; mkdir -p build-test; echo "== $$cc, target $$t (ASan+UBSan) =="; \
	  CC=$$cc cmake -S . -B $$d -DQK_TARGET=$$t -DQK_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo > $$d.log 2>&1 || { cat $$d.log; exit 1; }; \
	  cmake --build $$d -j $(JOBS) >> $$d.log 2>&1 || { cat $$d.log; exit 1; }; \
	  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    ctest --test-dir $$d --output-on-failure -j $(JOBS); \
	done; done
	$(MAKE) build
	ctest --test-dir build --output-on-failure -j $(JOBS)
	tests/install/check_install.sh build
	$(MAKE) pyinstall
	QK_BUILD=$(CURDIR)/build QK_REQUIRE_PACKAGE=1 $(PYVENV)/bin/python -m pytest -q tests/python
	@echo "== the hostile-input and msModelSlim cases again, on qk built with clang ASan+UBSan (generic) =="
	QK_BUILD=$(CURDIR)/build-test/clang-generic QK_REQUIRE_PACKAGE=1 ASAN_OPTIONS=detect_leaks=1 \
	  UBSAN_OPTIONS=print_stacktrace=1 $(PYVENV)/bin/python -m pytest -q tests/python/test_hostile_inputs.py \
	  tests/python/test_msmodelslim_compat.py
	tests/fuzz/run.sh 15
	$(MAKE) test-cross
	@echo "make test: all configurations passed"

# ---- the other architectures' targets: cross-built with gcc, every test run under qemu-user
#      (QEMU_CPU=max: every feature qemu emulates, BF16 included), with UBSan (ASan does not run
#      under qemu-user) ----
test-cross: cross-deps
	@set -e; for a in $(CROSS_ARCHS); do \
	  for t in $$(grep -l "^set(QK_TARGET_ARCH $$a)" cmake/targets/*.cmake | xargs -r -n1 basename | sed 's/\.cmake$$//' | sort); do \
	  d=build-test/cross-$$t; mkdir -p build-test; echo "== gcc, target $$t under qemu-user (UBSan) =="; \
	  cmake -S . -B $$d -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/$$a.cmake -DQK_TARGET=$$t -DQK_SANITIZE=ON \
	    -DQK_SANITIZERS=undefined -DCMAKE_BUILD_TYPE=RelWithDebInfo > $$d.log 2>&1 || { cat $$d.log; exit 1; }; \
	  cmake --build $$d -j $(JOBS) >> $$d.log 2>&1 || { cat $$d.log; exit 1; }; \
	  QEMU_CPU=max UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir $$d --output-on-failure -j $(JOBS); \
	done; done

# ---- the Python package, installed the way a user does (pip install .) into a venv that
#      sees the system's numpy/torch ----
pyinstall: pydeps
	python3 -m venv --system-site-packages $(PYVENV)
	$(PYVENV)/bin/python -m pip install -q --disable-pip-version-check .

install: build
	cmake --install build --prefix $(PREFIX)

# ---- extras ----
fuzz: deps
	tests/fuzz/run.sh 600

bench-deps: deps
	@dpkg-query -W -f='$${Status}' libdnnl-dev 2>/dev/null | grep -q "install ok installed" || \
	  { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libdnnl-dev; }

bench: bench-deps build
	./build/qk bench all --json build/bench.json --plot build/bench.svg

clean:
	rm -rf build build-test build-fuzz
