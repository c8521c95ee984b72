package main

import (
	"maps"
	"os"
	"path/filepath"
	"testing"
)

// TestReadList: warm --list takes the lists bench run --files-from takes
// (a tab and a size after the path), and the paths it took before.
func TestReadList(t *testing.T) {
	file := filepath.Join(t.TempDir(), "list")
	if err := os.WriteFile(file, []byte("a/1.jpg\t120\n ./b/2.jpg \n\n/c/3.jpg\nd/../e.jpg\t7\r\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readList(file)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"a/1.jpg": true, "b/2.jpg": true, "c/3.jpg": true, "e.jpg": true}
	if !maps.Equal(got, want) {
		t.Errorf("readList = %v, want %v", got, want)
	}
}
