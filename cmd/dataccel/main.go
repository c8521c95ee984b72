// Command dataccel is the one binary: mount, warm, bench, score, cache, webhook, version.
// It wires the concrete types together; flags, environment and logging are
// read here and nowhere else.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	// A closed terminal (SIGHUP) ends a foreground mount as Ctrl-C does
	// (unmounted, the RAM cache saved) rather than killing it and leaving a
	// dead mount. One ignored at start stays ignored, as for any program:
	// nohup's SIGHUP, a script's background job's SIGINT (Notify would
	// take it back).
	stopSignals := []os.Signal{syscall.SIGTERM}
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGHUP} {
		if !signal.Ignored(sig) {
			stopSignals = append(stopSignals, sig)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
	defer stop()
	// The first signal starts an orderly end (a mount saves its RAM cache,
	// up to 20 s); a second one ends the process at once, as a user who
	// presses Ctrl-C twice means. Said, since the orderly end can wait: on
	// a read of a stopped or hung mount, which only that second signal
	// (a fatal one) breaks.
	var returned atomic.Bool
	context.AfterFunc(ctx, func() {
		stop()
		if !returned.Load() {
			fmt.Fprintln(os.Stderr, "dataccel: stopping; a second signal ends it at once")
		}
	})
	root := newRootCmd()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	returned.Store(true)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dataccel:", err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

// group makes cmd, which only holds subcommands, fail on an unknown one:
// cobra would show its help and exit 0, so that a script's mistyped
// `dataccel cache purg` would pass for done.
func group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageError{fmt.Errorf("unknown command %q for %q (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath())}
		}
		return nil
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	return cmd
}

// usageError marks bad flags or arguments (exit code 2).
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func newRootCmd() *cobra.Command {
	var logLevel string
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	root := &cobra.Command{
		Use:           "dataccel",
		Short:         "Data-loading accelerator: mount S3 datasets for GPU training, with prefetch and a RAM+NVMe cache",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)}
			}
			*logger = *slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
			return nil
		},
	}
	root.Version = version // --version, as the version command
	root.SetVersionTemplate("dataccel {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.AddCommand(
		newMountCmd(logger),
		newWarmCmd(logger),
		newCacheCmd(),
		newWebhookCmd(logger),
		newBenchCmd(logger),
		newScoreCmd(),
		newVersionCmd(),
	)
	argsAreUsage(root)
	return root
}

// argsAreUsage makes a wrong count of arguments a usage error (exit 2),
// as a wrong flag is, on every command under cmd: cobra's checks return
// plain errors (exit 1), as a failed run would.
func argsAreUsage(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			err := check(c, args)
			var ue usageError
			if err != nil && !errors.As(err, &ue) {
				return usageError{err}
			}
			return err
		}
	}
	for _, sub := range cmd.Commands() {
		argsAreUsage(sub)
	}
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "dataccel", version)
		},
	}
}
