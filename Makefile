# dataccel: `make demo` runs the whole story on a local S3 server; `make test` runs the tests.
GO      ?= go
BIN     := bin/dataccel
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: build deps test test-short demo bench vet clean

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/dataccel

deps:
	./scripts/deps.sh

# The full suite: real S3 server (started by the tests), real FUSE mounts, race detector.
test: deps
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 15m ./...

vet:
	$(GO) vet ./...

demo: deps build
	./scripts/demo.sh

bench: deps
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

clean:
	rm -rf bin .demo
