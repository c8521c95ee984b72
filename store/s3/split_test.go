package s3

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestRestGuess compares restGuess with the true count of keys between a
// page and a range's bound, for the naming styles the split guesses for.
// The guess sizes a range's second page: a guess far too high sends keys
// past the bound again, far too low costs a third page.
func TestRestGuess(t *testing.T) {
	const dir = "train/n01440764/"
	named := func(n int, name func(i int) string) []string {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = dir + name(i)
		}
		slices.Sort(keys)
		return keys
	}
	decimal := named(10000, func(i int) string { return fmt.Sprintf("n01440764_%d.JPEG", i) })
	padded := named(10000, func(i int) string { return fmt.Sprintf("img_%06d.jpg", i) })
	hexed := named(10000, func(i int) string { return fmt.Sprintf("%x.bin", sha256.Sum256([]byte{byte(i), byte(i >> 8)})) })
	cases := []struct {
		name        string
		keys        []string
		after, upTo string // the range: the page is its first 1,000 keys
	}{
		{"decimal, first range", decimal, "", "n01440764_2"},
		{"decimal, middle range", decimal, "n01440764_2", "n01440764_3"},
		{"decimal, three buckets on", decimal, "n01440764_4", "n01440764_8"},
		{"zero-padded", padded, "", "img_003"},
		{"zero-padded, middle range", padded, "img_004", "img_007"},
		{"hex", hexed, "", "4"},
		{"hex, middle range", hexed, "8", "c"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			upTo := dir + c.upTo
			from, _ := slices.BinarySearch(c.keys, dir+c.after)
			if c.after == "" {
				from = 0
			}
			page := c.keys[from : from+1000]
			last, _ := slices.BinarySearch(c.keys, upTo)
			for last < len(c.keys) && c.keys[last] <= upTo {
				last++
			}
			want := last - (from + 1000)
			if want <= 0 || strings.Compare(page[len(page)-1], upTo) >= 0 {
				t.Fatalf("bad case: %d keys past the page before %q", want, upTo)
			}
			got := restGuess(page, len(dir), upTo)
			if got < want*2/3 || got > want*3/2 {
				t.Errorf("restGuess = %d, %d keys lie between the page and %q", got, want, c.upTo)
			}
			t.Logf("guess %d, true %d", got, want)
		})
	}
}
