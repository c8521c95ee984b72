# dataccel: `make demo` runs the whole story on a local S3 server; `make test` runs the tests.
GO      ?= go
BIN     := bin/dataccel
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

# Fuzz budgets are counts of executions, about 20 s each on a 2-core machine. A duration
# (-fuzztime 20s) trips a race in Go 1.26's fuzz coordinator (golang/go#75804): at the
# deadline it can report "context deadline exceeded" as a failure with no failing input.
# FuzzDecodeRecord's inputs are records of kilobytes: minimising each new one it finds for the
# default 60 s would stall the run, so its minimisation is cut to 100 executions.
FUZZ_EXECS      ?= 100000
FUZZ_EXECS_SCAN ?= 250000

.PHONY: build install deps test fuzz demo bench compare compare-random vet clean
PREFIX  ?= /usr/local

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/dataccel

# The examples in README.md call the binary as `dataccel`.
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/dataccel

deps:
	./scripts/deps.sh

# The full suite: real S3 server (started by the tests), real FUSE mounts, race detector.
test: deps vet
	$(GO) test -race -count=1 -timeout 15m ./...
	$(MAKE) fuzz

# Each fuzz target for a fixed number of executions (seed corpora in */testdata/fuzz).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzKeyToPath$$' -fuzztime $(FUZZ_EXECS)x ./fuse
	$(GO) test -run '^$$' -fuzz '^FuzzAnnounce$$' -fuzztime $(FUZZ_EXECS)x ./fuse
	$(GO) test -run '^$$' -fuzz '^FuzzScanPage$$' -fuzztime $(FUZZ_EXECS_SCAN)x ./store/s3
	$(GO) test -run '^$$' -fuzz '^FuzzReadResponse$$' -fuzztime $(FUZZ_EXECS)x ./store/s3
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRecord$$' -fuzztime $(FUZZ_EXECS_SCAN)x -fuzzminimizetime 100x ./cache

# go vet, then staticcheck at a pinned version (fetched through the Go module proxy).
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
vet:
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

demo: deps build
	./scripts/demo.sh

bench: deps
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

clean:
	rm -rf bin .demo

# dataccel beside s3fs and rclone on one dataset behind a 10 ms round trip (see bench/RESULTS.md).
compare: build
	./bench/compare.sh

# Readers at random offsets of large files, dataccel beside s3fs and rclone (fio; see bench/RESULTS.md).
compare-random: build
	./bench/randread.sh
