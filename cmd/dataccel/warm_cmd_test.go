package main

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/dataccel/dataccel/store"
)

// TestReadList: warm --list takes the lists bench run --files-from takes
// (a tab and a size after the path), and the paths it took before, each
// with its place in the list (a path listed twice keeps its first).
func TestReadList(t *testing.T) {
	file := filepath.Join(t.TempDir(), "list")
	if err := os.WriteFile(file, []byte("a/1.jpg\t120\n ./b/2.jpg \n\n/c/3.jpg\nd/../e.jpg\t7\r\nb/2.jpg\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readList(file)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"a/1.jpg": 1, "b/2.jpg": 2, "c/3.jpg": 3, "e.jpg": 4}
	if !maps.Equal(got, want) {
		t.Errorf("readList = %v, want %v", got, want)
	}
}

// TestWarmPassesKeepFailures: an object that failed in the first pass is
// still reported after a second pass (run because the disk tier dropped
// writes) that had no failure of its own, so warm does not exit 0.
func TestWarmPassesKeepFailures(t *testing.T) {
	objs := []store.Object{{Key: "bad"}, {Key: "dropped"}, {Key: "fine"}}
	var passes [][]string
	failed, err := warmPasses(objs, func(n int, pending []store.Object) ([]warmFailure, bool, error) {
		var keys []string
		var failed []warmFailure
		for _, o := range pending {
			keys = append(keys, o.Key)
			if o.Key == "bad" {
				failed = append(failed, warmFailure{o.Key, errors.New("access denied")})
			}
		}
		passes = append(passes, keys)
		return failed, n == 1, nil // the first pass dropped a write
	}, func(pending []store.Object, failed []warmFailure) []store.Object {
		for _, f := range failed {
			if f.key != "bad" {
				t.Errorf("failure of %q reported; only bad failed", f.key)
			}
		}
		return []store.Object{{Key: "dropped"}} // not cached, not failed
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"bad", "dropped", "fine"}, {"dropped"}}; !reflect.DeepEqual(passes, want) {
		t.Errorf("passes read %v, want %v", passes, want)
	}
	if len(failed) != 1 || failed[0].key != "bad" {
		t.Errorf("failures %v, want bad's alone", failed)
	}
}

// TestWalkOrder: warm's order is a walk's of the tree, name by name, not
// the keys' bytes ('-' and '.' sort before '/').
func TestWalkOrder(t *testing.T) {
	keys := []string{"train.1/a", "train/b/c", "train-x/a", "train/a", "train/b.jpg", "train", "a"}
	slices.SortFunc(keys, walkOrder)
	want := []string{"a", "train", "train/a", "train/b/c", "train/b.jpg", "train-x/a", "train.1/a"}
	if !slices.Equal(keys, want) {
		t.Fatalf("walk order %q, want %q", keys, want)
	}
}
