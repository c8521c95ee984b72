// Package bench measures how fast a dataset loads and what that is worth:
// it generates ImageNet-like datasets (Generate), emulates a training data
// loader in the style of MLPerf Storage / DLIO over directories and S3
// prefixes (Run), writes the results as a terminal table, JSON and a
// self-contained HTML report, turns a result into a GPU
// cost-performance ranking (Score), and reports the summary of a
// comparison with the peers that bench/compare.sh writes (CompareSummary:
// each target met or missed, as text and HTML).
//
// It owns the loader emulation, its statistics and the score formulas. It
// does not own storage access (it reads directories with plain
// open/read/close system calls and objects through store.Store), flags,
// environment or logging setup: cmd/dataccel wires those in. It keeps no
// package-level mutable state.
package bench
