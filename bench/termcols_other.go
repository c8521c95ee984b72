//go:build !linux

package bench

import "io"

// termCols returns 0 outside Linux: the redrawn line keeps to the default
// width.
func termCols(io.Writer) int { return 0 }
