# dataccel: `make demo` runs the whole story on a local S3 server; `make test` runs the tests.
GO      ?= go
BIN     := bin/dataccel
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

FUZZTIME ?= 20s

.PHONY: build deps test fuzz demo bench compare vet clean

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/dataccel

deps:
	./scripts/deps.sh

# The full suite: real S3 server (started by the tests), real FUSE mounts, race detector.
test: deps
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 15m ./...
	$(MAKE) fuzz

# Each fuzz target for a short while (seed corpus in fuse/testdata/fuzz).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzKeyToPath$$' -fuzztime $(FUZZTIME) ./fuse
	$(GO) test -run '^$$' -fuzz '^FuzzAnnounce$$' -fuzztime $(FUZZTIME) ./fuse
	$(GO) test -run '^$$' -fuzz '^FuzzScanPage$$' -fuzztime $(FUZZTIME) ./store/s3

vet:
	$(GO) vet ./...

demo: deps build
	./scripts/demo.sh

bench: deps
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

clean:
	rm -rf bin .demo

# dataccel beside s3fs and rclone on one dataset behind a 10 ms round trip (see bench/RESULTS.md).
compare: build
	./bench/compare.sh
