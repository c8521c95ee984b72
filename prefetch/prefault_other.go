//go:build !linux

package prefetch

func prefault([]byte) {}
