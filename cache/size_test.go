package cache

import "testing"

func TestParseSize(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"1048576", 1048576, true},
		{"9223372036854775807", 9223372036854775807, true},
		{"512MiB", 512 << 20, true},
		{"512mib", 512 << 20, true},
		{"2GiB", 2 << 30, true},
		{"2Gi", 2 << 30, true},
		{"500G", 500e9, true},
		{"500GB", 500e9, true},
		{"1.5TB", 1.5e12, true},
		{"1.5TiB", 3 << 39, true},
		{"64k", 64000, true},
		{" 10 MiB ", 10 << 20, true},
		{"100B", 100, true},
		{"", 0, false},
		{"MiB", 0, false},
		{"-5G", 0, false},
		{"12XB", 0, false},
		{"1.2.3G", 0, false},
		{"99999999999PiB", 0, false},
		{"10%", 0, false},
	}
	for _, c := range cases {
		got, err := ParseSize(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestParseSizeOrPercent(t *testing.T) {
	cases := []struct {
		in   string
		of   int64
		want int64
		ok   bool
	}{
		{"10%", 1000, 100, true},
		{"100%", 1000, 1000, true},
		{"2.5 %", 1 << 40, 1 << 40 / 40, true},
		{"2GiB", 1000, 2 << 30, true},
		{"0%", 1000, 0, false},
		{"101%", 1000, 0, false},
		{"x%", 1000, 0, false},
		{"10%", -1, 0, false},
	}
	for _, c := range cases {
		got, err := ParseSizeOrPercent(c.in, c.of)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseSizeOrPercent(%q, %d) = %d, %v; want %d, ok=%v", c.in, c.of, got, err, c.want, c.ok)
		}
	}
}
