package cache

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// unitMultiplier returns the multiplier of a lower-case unit suffix. Bare
// letters and "xB" are decimal (500G = 500e9, as disk vendors count);
// "xi"/"xiB" are binary.
func unitMultiplier(unit string) (float64, bool) {
	switch unit {
	case "", "b":
		return 1, true
	case "k", "kb":
		return 1e3, true
	case "ki", "kib":
		return 1 << 10, true
	case "m", "mb":
		return 1e6, true
	case "mi", "mib":
		return 1 << 20, true
	case "g", "gb":
		return 1e9, true
	case "gi", "gib":
		return 1 << 30, true
	case "t", "tb":
		return 1e12, true
	case "ti", "tib":
		return 1 << 40, true
	case "p", "pb":
		return 1e15, true
	case "pi", "pib":
		return 1 << 50, true
	}
	return 0, false
}

// ParseSize parses a byte size such as "512MiB", "2GiB", "500G", "1.5TB" or
// "1048576". Units are case-insensitive; the result is rounded down to a byte.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("parse size %q: no number", s)
	}
	mult, ok := unitMultiplier(unit)
	if !ok {
		return 0, fmt.Errorf("parse size %q: unknown unit %q", s, unit)
	}
	if unit == "" || unit == "b" {
		// Plain bytes: parse as an integer so large values stay exact.
		if n, err := strconv.ParseInt(num, 10, 64); err == nil {
			return n, nil
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("parse size %q: %w", s, err)
	}
	v := f * mult
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("parse size %q: too large", s)
	}
	return int64(v), nil
}

// ParseSizeOrPercent parses a size as ParseSize does, or a percentage of of
// ("10%" of 1000 = 100). A percentage must be in (0, 100].
func ParseSizeOrPercent(s string, of int64) (int64, error) {
	t := strings.TrimSpace(s)
	if !strings.HasSuffix(t, "%") {
		return ParseSize(t)
	}
	p, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(t, "%")), 64)
	if err != nil {
		return 0, fmt.Errorf("parse percentage %q: %w", s, err)
	}
	if !(p > 0 && p <= 100) {
		return 0, fmt.Errorf("parse percentage %q: must be in (0, 100]", s)
	}
	if of < 0 {
		return 0, fmt.Errorf("parse percentage %q: negative base %d", s, of)
	}
	return int64(float64(of) * p / 100), nil
}
