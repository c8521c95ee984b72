package bench

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dataccel/dataccel/internal/testenv"
)

// TestProgressTermCols: the width comes from the terminal w writes to; a buffer or
// a regular file has none (0: the default applies).
func TestProgressTermCols(t *testing.T) {
	pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		testenv.Missing(t, "no pseudo-terminal (/dev/ptmx): %v", err)
	}
	defer pty.Close()
	if err := unix.IoctlSetWinsize(int(pty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 30, Col: 100}); err != nil {
		t.Fatal(err)
	}
	file, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for _, tc := range []struct {
		name string
		w    io.Writer
		want int
	}{{"terminal", pty, 100}, {"file", file, 0}, {"buffer", &bytes.Buffer{}, 0}} {
		if got := termCols(tc.w); got != tc.want {
			t.Errorf("%s: %d columns, want %d", tc.name, got, tc.want)
		}
	}
}
