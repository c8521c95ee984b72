//go:build !linux

package bench

import "os"

// readPath reads the file at p whole, using buf as scratch. Outside Linux
// it goes through os.File and pythonOpen has no effect.
func readPath(p string, buf []byte, _ bool) (int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return ReadAll(f, buf)
}
