package fuse

import "testing"

func TestKernelAtLeast(t *testing.T) {
	for _, tc := range []struct {
		release string
		want    bool
	}{
		{"6.18.44-fc-v1045", true},
		{"6.9.0", true},
		{"6.9", true},
		{"6.8.12-generic", false},
		{"5.15.0-101-generic", false},
		{"7.0.1", true},
		{"6.10-rc1", true},
		{"6", false},
		{"", false},
		{"x.y", false},
	} {
		if got := kernelAtLeast(tc.release, 6, 9); got != tc.want {
			t.Errorf("kernelAtLeast(%q, 6, 9) = %v, want %v", tc.release, got, tc.want)
		}
	}
}
