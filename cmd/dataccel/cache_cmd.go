package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/fuse"
	"github.com/dataccel/dataccel/localcopy"
	"github.com/dataccel/dataccel/store"
)

// mountRecord is written into the cache dir by a running mount, so that
// `cache stat` can find its live counters.
const mountRecord = "mounted-at"

func newCacheCmd() *cobra.Command {
	var dir string
	cmd := group(&cobra.Command{
		Use:   "cache",
		Short: "Inspect or empty a disk cache directory",
	})
	cmd.PersistentFlags().StringVar(&dir, "cache-dir", "", "the disk cache directory")
	need := func() error {
		if dir == "" {
			return usageError{errors.New("--cache-dir is required")}
		}
		return nil
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "stat",
		Short: "Entries, bytes and compression savings; hit/miss counters of a running mount",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := need(); err != nil {
				return err
			}
			s, err := cache.StatDir(dir)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintf(w, "cache dir\t%s\n", dir)
			if s.UnknownFormat != "" {
				fmt.Fprintf(w, "format\tunknown (%s says %q: a newer version's cache, or a damaged marker): mounts refuse it; `dataccel cache purge` empties it for this version\n", cache.MarkerName, s.UnknownFormat)
			}
			fmt.Fprintf(w, "blocks\t%d\n", s.Entries)
			fmt.Fprintf(w, "bytes on disk\t%s\n", humanBytes(s.DiskBytes))
			fmt.Fprintf(w, "bytes cached (raw)\t%s\n", humanBytes(s.RawBytes))
			fmt.Fprintf(w, "saved by compression\t%s (%d blocks compressed)\n", humanBytes(s.SavedBytes), s.Compressed)
			if s.Unreadable > 0 || s.TempFiles > 0 {
				fmt.Fprintf(w, "segments ending in unreadable bytes\t%d\nleftover files (not segments)\t%d\n", s.Unreadable, s.TempFiles)
			}
			if n, bytes := localcopy.Held(filepath.Join(dir, localCopyDir)); n > 0 {
				fmt.Fprintf(w, "local copies (--passthrough-min-size)\t%d, %s\n", n, humanBytes(bytes))
			}
			w.Flush()
			if mnt, err := os.ReadFile(filepath.Join(dir, mountRecord)); err == nil {
				mp := strings.TrimSpace(string(mnt))
				if live, _ := fuse.IsMountpoint(mp); live {
					switch b, err := readFileWithin(filepath.Join(mp, fuse.ControlDir, "stats"), 5*time.Second); {
					case err == nil:
						fmt.Fprintf(cmd.OutOrStdout(), "\nrunning mount %s counters:\n%s", mp, b)
					case errors.Is(err, syscall.ENOTCONN):
						fmt.Fprintf(cmd.OutOrStdout(), "\nthe mount at %s is not served: its process ended without unmounting (killed?); the next mount there detaches it\n", mp)
					default:
						fmt.Fprintf(cmd.OutOrStdout(), "\nrunning mount %s: counters unreadable: %v\n", mp, err)
					}
				}
			}
			return nil
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "purge",
		Short: "Delete every cached block, local copy and saved listing (refuses a directory a mount is using)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := need(); err != nil {
				return err
			}
			err := cache.PurgeDir(dir, func() error { // under the cache's lock: a mount starting now fails to take the directory instead of reading what goes
				if err := os.RemoveAll(filepath.Join(dir, localCopyDir)); err != nil {
					return fmt.Errorf("purge local copies: %w", err)
				}
				// The listings too: a purge asks the next mount to start
				// from the store, names included.
				for _, pattern := range []string{manifestPrefix + "*", store.ManifestTempPattern} {
					paths, _ := filepath.Glob(filepath.Join(dir, pattern))
					for _, p := range paths {
						if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
							return fmt.Errorf("purge namespace manifests: %w", err)
						}
					}
				}
				return nil
			})
			if errors.Is(err, cache.ErrInUse) {
				return fmt.Errorf("%w%s", err, cacheUser(dir))
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "purged", dir)
			return nil
		},
	})
	return cmd
}

// cacheUser names the mount that uses the cache dir, by the record it keeps
// there (" (the mount at /data)"), or nothing when there is none or the
// place it names is not mounted (a record a killed mount left): warm and
// purge hold the directory without one.
func cacheUser(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, mountRecord))
	mp := strings.TrimSpace(string(b))
	if err != nil || mp == "" {
		return ""
	}
	if mounted, _ := fuse.IsMountpoint(mp); !mounted {
		return ""
	}
	return " (the mount at " + mp + ", by the record it keeps there)"
}

// readFileWithin reads the file at path, giving up after d: a file in a
// mount whose server is stopped (SIGSTOP, a debugger) or hung blocks its
// reader until the server answers. The read left behind ends with the
// process.
func readFileWithin(path string, d time.Duration) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := os.ReadFile(path)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-time.After(d):
		return nil, fmt.Errorf("read %s: no answer within %s (the mount's process stopped or hung?)", path, d)
	}
}
