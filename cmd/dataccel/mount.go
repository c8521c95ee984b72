package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/dataccel/dataccel/fuse"
)

type mountFlags struct {
	s3          s3Flags
	allowOther  bool
	uid, gid    int
	metadataTTL time.Duration
	checkTime   time.Duration
	debugFUSE   bool
}

func newMountCmd(logger *slog.Logger) *cobra.Command {
	var f mountFlags
	cmd := &cobra.Command{
		Use:   "mount s3://bucket[/prefix] MOUNTPOINT",
		Short: "Mount a bucket prefix read-only; runs in the foreground until SIGINT/SIGTERM",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageError{fmt.Errorf("mount takes 2 arguments, s3://bucket[/prefix] and MOUNTPOINT; got %d", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMount(cmd.Context(), logger, f, args[0], args[1])
		},
	}
	fl := cmd.Flags()
	f.s3.register(fl)
	fl.BoolVar(&f.allowOther, "allow-other", false, "let users other than the mounting one read the mount (FUSE allow_other)")
	fl.IntVar(&f.uid, "uid", os.Getuid(), "owner uid of files and directories")
	fl.IntVar(&f.gid, "gid", os.Getgid(), "owner gid of files and directories")
	fl.DurationVar(&f.metadataTTL, "metadata-ttl", time.Hour, "how long listings and attributes are trusted before re-listing (datasets rarely change under training)")
	fl.DurationVar(&f.checkTime, "connect-timeout", 10*time.Second, "how long to wait for the endpoint at start")
	fl.BoolVar(&f.debugFUSE, "debug-fuse", false, "log every FUSE request (very verbose)")
	return cmd
}

func runMount(ctx context.Context, logger *slog.Logger, f mountFlags, rawURL, dir string) error {
	bucket, prefix, err := parseS3URL(rawURL)
	if err != nil {
		return err
	}
	if f.metadataTTL <= 0 {
		return usageError{fmt.Errorf("--metadata-ttl must be positive, got %s", f.metadataTTL)}
	}
	if f.uid < 0 || f.gid < 0 {
		return usageError{fmt.Errorf("--uid and --gid must not be negative")}
	}
	// Check the mountpoint before contacting the store: it is cheaper and
	// the more likely mistake.
	if err := fuse.CheckMountpoint(dir); err != nil {
		return err
	}
	st, err := f.s3.openStore(ctx, bucket, f.checkTime)
	if err != nil {
		return err
	}
	m, err := fuse.New(dir, fuse.Config{
		Store:       st,
		Opener:      fuse.DirectOpener{Store: st},
		Prefix:      prefix,
		FsName:      "s3://" + bucket + "/" + prefix,
		MetadataTTL: f.metadataTTL,
		UID:         uint32(f.uid),
		GID:         uint32(f.gid),
		AllowOther:  f.allowOther,
		Logger:      logger,
		Debug:       f.debugFUSE,
	})
	if err != nil {
		return err
	}
	logger.Info("mounted", "source", "s3://"+bucket+"/"+prefix, "mountpoint", m.Dir)
	gone := make(chan struct{})
	go func() { m.Wait(); close(gone) }()
	select {
	case <-ctx.Done():
		logger.Info("signal received, unmounting", "mountpoint", m.Dir)
		if err := m.Unmount(); err != nil {
			return err
		}
		logger.Info("unmounted", "mountpoint", m.Dir)
	case <-gone:
		logger.Info("unmounted from outside", "mountpoint", m.Dir)
	}
	return nil
}
