package bench

import (
	"io"

	"golang.org/x/sys/unix"
)

// termCols returns the width in columns of the terminal w writes to, or 0
// when w is no terminal (the ioctl golang.org/x/term's GetSize makes).
func termCols(w io.Writer) int {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}
