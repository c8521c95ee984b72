package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/dataccel/dataccel/bench"
	"github.com/dataccel/dataccel/store"
	"github.com/dataccel/dataccel/store/s3"
)

// newBenchCmd is `dataccel bench gen|run|compare-report`.
func newBenchCmd(logger *slog.Logger) *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "bench",
		Short: "Generate a dataset and measure how fast paths load it (MLPerf Storage / DLIO style)",
		Long: `bench generates ImageNet-like datasets and emulates a training data loader over
directories (any mount) and s3:// prefixes (direct GETs). See bench/README.md.`,
	})
	cmd.AddCommand(newBenchGenCmd(), newBenchRunCmd(logger), newBenchCompareReportCmd())
	return cmd
}

// benchS3 holds the flags that reach a bucket. Credentials come from where
// the mount finds them (s3Flags.credentials), never from a flag: a secret
// on the command line is visible to every user through ps.
type benchS3 struct {
	endpoint, region string
	wait             waitFlags // the mount's bounds on waiting for the store
}

func (b *benchS3) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&b.endpoint, "endpoint", "", "S3 endpoint URL for s3:// paths, http:// or https:// (default: AWS S3; path-style when set)")
	fl.StringVar(&b.region, "region", "", "S3 region (default: $AWS_REGION, else us-east-1)")
	b.wait.register(fl, "how long one request to the store may take, retries included, before the command fails")
}

// validate refuses the values the mount refuses.
func (b *benchS3) validate() error { return b.wait.validate() }

// benchStoreFromURL builds a store for s3://bucket[/prefix] and returns it
// with the prefix ("" or ending in "/"), once the bucket answered within
// --connect-timeout (as mount and warm check it). With create, a missing
// bucket is made.
func benchStoreFromURL(ctx context.Context, raw string, f benchS3, maxConns int, create bool) (*s3.Store, string, error) {
	bucket, prefix, err := parseS3URL(raw)
	if err != nil {
		return nil, "", err
	}
	// The mount's resolution of region, path style and credentials; bench's
	// --profile names a GPU profile, so the AWS profile comes from
	// $AWS_PROFILE only.
	cfg, creds, err := (&s3Flags{endpoint: f.endpoint, region: f.region, pathStyle: "auto"}).config(ctx, bucket)
	if err != nil {
		return nil, "", err
	}
	cfg.MaxConns = maxConns
	st, err := s3.New(cfg)
	if err != nil {
		return nil, "", usageError{err}
	}
	err = checkStore(ctx, st, prefix, cfg, creds, f.wait.connect)
	if create && errors.Is(err, store.ErrNoBucket) {
		mctx, cancel := context.WithTimeout(ctx, f.wait.io)
		defer cancel()
		if err = st.MakeBucket(mctx); errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("%w: no answer within %s (--io-timeout)", err, f.wait.io)
		}
	}
	if err != nil {
		return nil, "", err
	}
	return st, prefix, nil
}

// benchSource reads st with the mount's retries and timeouts: a store that
// stalls or stops answering mid-run fails it within --io-timeout.
func benchSource(st *s3.Store, prefix, label string, f benchS3) bench.StoreSource {
	counting := store.NewCounting(st) // below the retries: every try is a GET
	retrying := store.NewRetrying(counting, f.wait.retry(nil, nil))
	return bench.StoreSource{Store: retrying, Prefix: prefix, Label: label, Counts: counting.C}
}

// benchProgress draws bars on stderr: redrawn on a terminal, plain lines otherwise.
func benchProgress(quiet bool) *bench.Progress {
	if quiet {
		return nil
	}
	fi, err := os.Stderr.Stat()
	return bench.NewProgress(os.Stderr, err == nil && fi.Mode()&os.ModeCharDevice != 0)
}

func newBenchGenCmd() *cobra.Command {
	var (
		to, preset string
		cfg        bench.GenConfig
		s3f        benchS3
		quiet      bool
	)
	var presets []string
	for _, p := range bench.GenPresets() {
		presets = append(presets, fmt.Sprintf("%s (%d files, %d classes)", p.Name, p.Files, p.Classes))
	}
	cmd := &cobra.Command{
		Use:   "gen --to s3://bucket/prefix|DIR",
		Short: "Generate an ImageNet-like dataset: incompressible JPEG-like files, or compressible text",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("bench gen takes no arguments: give where to write with --to %s", args[0])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return usageError{errors.New("--to is required")}
			}
			if preset != "" {
				found := false
				for _, p := range bench.GenPresets() {
					if p.Name == preset {
						found = true
						if !cmd.Flags().Changed("files") {
							cfg.Files = p.Files
						}
						if !cmd.Flags().Changed("classes") {
							cfg.Classes = p.Classes
						}
					}
				}
				if !found {
					return usageError{fmt.Errorf("--preset %q: want one of %s", preset, strings.Join(presets, ", "))}
				}
			}
			// Generate fills zero values with defaults: a value given must be
			// one it takes as it is (a --max-size 0 would become 1 MB).
			for _, c := range []struct {
				flag   string
				v, min int64
			}{{"files", int64(cfg.Files), 1}, {"classes", int64(cfg.Classes), 1}, {"subdirs", int64(cfg.Subdirs), 0},
				{"concurrency", int64(cfg.Concurrency), 1}, {"mean-size", cfg.MeanSize, bench.MinFileSize},
				{"min-size", cfg.MinSize, bench.MinFileSize}, {"max-size", cfg.MaxSize, bench.MinFileSize}} {
				if c.v < c.min {
					return usageError{fmt.Errorf("--%s %d: want at least %d", c.flag, c.v, c.min)}
				}
			}
			if err := cfg.Validate(); err != nil { // before the bucket is made
				return usageError{err}
			}
			var dst bench.Putter = bench.DirPutter{Root: to}
			var src bench.Source // what bench run would read at --to, if anything is there
			if fi, err := os.Stat(to); err == nil && fi.IsDir() {
				src = bench.DirSource{Root: to}
			}
			if strings.HasPrefix(to, "s3://") {
				if err := s3f.validate(); err != nil {
					return err
				}
				st, prefix, err := benchStoreFromURL(cmd.Context(), to, s3f, cfg.Concurrency, true)
				if err != nil {
					return err
				}
				cfg.Prefix, dst, cfg.PutTimeout = prefix, st, s3f.wait.io
				src = benchSource(st, prefix, to, s3f)
			}
			// Files of an earlier run that this one does not overwrite stay,
			// and bench run would read them with the new ones: say so, and
			// delete nothing (they may be someone's data).
			if src != nil {
				switch extra, err := cfg.Unplanned(cmd.Context(), src); {
				case err != nil:
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: could not check --to %s for files of an earlier run: %v\n", to, err)
				case len(extra) > 0:
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: --to %s already holds %d files this run does not write (such as %s): bench run would read them with the new ones; remove them or give another --to\n",
						to, len(extra), extra[0])
				}
			}
			res, err := bench.Generate(cmd.Context(), cfg, dst, benchProgress(quiet))
			if err != nil {
				return err
			}
			mean := float64(res.Bytes) / float64(max(res.Files, 1))
			fmt.Fprintf(cmd.OutOrStdout(), "generated %d files, %s (mean %.0f bytes), in %s to %s (%.1f MB/s)\n", res.Files,
				humanize.Bytes(uint64(res.Bytes)), mean, res.Elapsed.Round(time.Millisecond), to, float64(res.Bytes)/1e6/res.Elapsed.Seconds())
			// Sizes drawn past the bounds take the bound: with many of them
			// the dataset is not the mix asked for.
			if share := float64(res.Bounded) / float64(max(res.Files, 1)); share > 0.05 {
				fmt.Fprintf(cmd.ErrOrStderr(), "note: %.0f%% of the files took a size bound (--min-size %d, --max-size %d), and the mean is %.0f bytes against the %d asked: widen the bounds for the mix asked\n",
					100*share, cfg.MinSize, cfg.MaxSize, mean, cfg.MeanSize)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&to, "to", "", "destination: s3://bucket/prefix or a directory")
	fl.StringVar(&preset, "preset", "", "dataset shape: "+strings.Join(presets, ", "))
	fl.IntVarP(&cfg.Files, "files", "n", 1000, "number of files")
	fl.IntVar(&cfg.Classes, "classes", 10, "number of class directories")
	fl.IntVar(&cfg.Subdirs, "subdirs", 0, "subdirectories in each class directory, a tree two levels deep (0: files in the class directories)")
	fl.Int64Var(&cfg.MeanSize, "mean-size", 110_000, "mean file size in bytes (log-normal, bounded to --min-size..--max-size)")
	fl.Int64Var(&cfg.MinSize, "min-size", 10_000, "smallest file in bytes")
	fl.Int64Var(&cfg.MaxSize, "max-size", 1_000_000, "largest file in bytes")
	fl.Uint64Var(&cfg.Seed, "seed", 1, "seed: the same seed gives the same files")
	fl.IntVar(&cfg.Concurrency, "concurrency", 32, "parallel uploads")
	fl.StringVar(&cfg.Content, "content", bench.ContentJPEG, "what the files hold: "+bench.ContentJPEG+
		" (JPEG-like, incompressible) or "+bench.ContentText+" (JSON lines of words, compressible as text is)")
	fl.BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	s3f.register(cmd)
	return cmd
}

func newBenchRunCmd(logger *slog.Logger) *cobra.Command {
	var (
		cfg                bench.RunConfig
		profile, bandwidth string
		jsonFile, htmlFile string
		filesFrom          string
		noProbe, quiet     bool
		s3f                benchS3
	)
	var profiles []string
	for _, p := range bench.Profiles() {
		profiles = append(profiles, p.Name)
	}
	cmd := &cobra.Command{
		Use:   "run PATH...",
		Short: "Emulate a training data loader over one or more paths (directories or s3:// prefixes)",
		Long: `run reads each PATH epoch by epoch, in turn (A B A B ...), with W workers per emulated
accelerator loading batches of B files, and sleeps each batch's compute time of the
chosen profile, with a barrier per step. It prints per epoch the wall time, samples/s,
MB/s, per-file latency percentiles, time to first batch and accelerator utilisation (AU),
and the physical bounds (bytes/bandwidth, files x RTT/concurrency).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if !cmd.Flags().Changed("compute-per-sample") {
				p, ok := bench.LookupProfile(profile)
				if !ok {
					return usageError{fmt.Errorf("--profile %q: want one of %s, or give --compute-per-sample", profile, strings.Join(profiles, ", "))}
				}
				cfg.ComputePerSample = p.PerSample
				cfg.Profile = p.Name
			} else if cmd.Flags().Changed("profile") {
				return usageError{errors.New("give --profile or --compute-per-sample, not both")}
			}
			if cfg.Order != "shuffle" && cfg.Order != "dir" {
				return usageError{fmt.Errorf("--order %q: want shuffle or dir", cfg.Order)}
			}
			// The run fills zero values with defaults: a value given must be
			// one it takes as it is.
			for _, c := range []struct {
				flag string
				v    int
			}{{"accelerators", cfg.Accelerators}, {"workers", cfg.Workers}, {"batch", cfg.Batch}, {"epochs", cfg.Epochs}, {"concurrency", cfg.Concurrency}, {"prefetch", cfg.Prefetch}} {
				if c.v < 1 {
					return usageError{fmt.Errorf("--%s %d: want at least 1", c.flag, c.v)}
				}
			}
			switch {
			case cfg.MaxSteps < 0:
				return usageError{fmt.Errorf("--max-steps %d: want 0 (the whole dataset) or more", cfg.MaxSteps)}
			case cfg.ComputePerSample < 0 || cfg.RTT < 0 || cfg.RequestRate < 0:
				return usageError{errors.New("--compute-per-sample, --rtt and --request-rate cannot be negative")}
			case math.IsNaN(cfg.RequestRate) || math.IsInf(cfg.RequestRate, 0):
				return usageError{fmt.Errorf("--request-rate %v: want requests per second (0: no bound)", cfg.RequestRate)}
			case !(cfg.TargetAU > 0 && cfg.TargetAU <= 1): // NaN too
				return usageError{fmt.Errorf("--target-au %v: want a share in (0, 1]", cfg.TargetAU)}
			}
			if bandwidth != "" {
				b, err := parseBandwidth(bandwidth)
				if err != nil {
					return usageError{fmt.Errorf("--bandwidth %q: %w", bandwidth, err)}
				}
				cfg.Bandwidth = b
			}
			if filesFrom != "" {
				f, err := os.Open(filesFrom)
				if err != nil {
					return usageError{fmt.Errorf("--files-from: %w", err)}
				}
				cfg.FileList, err = bench.ParseFileList(f)
				f.Close()
				if err != nil {
					return usageError{fmt.Errorf("--files-from %s: %w", filesFrom, err)}
				}
			}
			if err := s3f.validate(); err != nil {
				return err
			}
			cfg.Probe = !noProbe
			cfg.Progress = benchProgress(quiet)
			cfg.Logger = logger
			// The outputs are made now: a path that cannot be written would
			// otherwise only show after every epoch ran.
			// Unless the run writes them, the files the checks created go.
			var outputs []benchOutput
			written := false
			defer func() {
				if !written {
					for _, o := range outputs {
						o.remove()
					}
				}
			}()
			for _, o := range []benchOutput{{flag: "json", path: jsonFile, write: (*bench.Result).WriteJSON},
				{flag: "html", path: htmlFile, write: (*bench.Result).WriteHTML}} {
				if o.path == "" {
					continue
				}
				var err error
				if o.remove, err = checkOutput(o.path); err != nil {
					return usageError{fmt.Errorf("--%s %s: %w", o.flag, o.path, err)}
				}
				outputs = append(outputs, o)
			}
			var sources []bench.Source
			for _, a := range args {
				if !strings.HasPrefix(a, "s3://") {
					switch fi, err := os.Stat(a); {
					case errors.Is(err, fs.ErrNotExist):
						return usageError{fmt.Errorf("%s: no such directory (a directory, such as a mount's, or an s3:// URL)", a)}
					case err != nil:
						return usageError{err}
					case !fi.IsDir():
						return usageError{fmt.Errorf("%s: not a directory or s3:// URL", a)}
					}
					sources = append(sources, bench.DirSource{Root: a})
					continue
				}
				st, prefix, err := benchStoreFromURL(cmd.Context(), a, s3f, cfg.Concurrency, false)
				if err != nil {
					return err
				}
				sources = append(sources, benchSource(st, prefix, a, s3f))
			}
			res, err := bench.Run(ctx, cfg, sources...)
			// A run stopped mid-way still shows the epochs it completed;
			// its files are written only when every epoch completed (the
			// search for the most accelerators, which comes after them,
			// failed or was stopped), so that no partial result passes
			// for a whole one.
			if err != nil && (res == nil || res.Epochs() < cfg.Epochs*len(sources)) {
				if res != nil && res.Epochs() > 0 {
					if terr := res.WriteTable(cmd.OutOrStdout()); terr != nil {
						return errors.Join(err, terr)
					}
				}
				return err
			}
			// The tables first, and each output whatever became of the
			// others: one that fails loses nothing else.
			werr := errors.Join(err, res.WriteTable(cmd.OutOrStdout()))
			written = true
			for _, o := range outputs {
				werr = errors.Join(werr, writeFile(o.path, func(w io.Writer) error { return o.write(res, w) }))
			}
			if err != nil && len(outputs) > 0 {
				logger.Warn("every epoch completed and its results are written; the search for the most accelerators did not finish")
			}
			return werr
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&cfg.Accelerators, "accelerators", 1, "emulated accelerators (data-parallel ranks)")
	fl.IntVar(&cfg.Workers, "workers", 4, "reader workers per accelerator (directories)")
	fl.IntVar(&cfg.Batch, "batch", 400, "batch size per accelerator, in samples")
	fl.IntVar(&cfg.Prefetch, "prefetch", 2, "batches each worker may load ahead")
	fl.IntVar(&cfg.Epochs, "epochs", 3, "epochs per path")
	fl.IntVar(&cfg.MaxSteps, "max-steps", 0, "stop each epoch after this many steps (0: whole dataset)")
	fl.StringVar(&cfg.Order, "order", "shuffle", "read order: shuffle (new permutation per epoch) or dir")
	fl.StringVar(&filesFrom, "files-from", "", "read the files this file lists (one path per line relative to each PATH, optionally a tab and the size) instead of walking each directory, as a job with an annotation file or a CSV of paths does")
	fl.Uint64Var(&cfg.Seed, "seed", 1, "shuffle seed")
	fl.StringVar(&profile, "profile", "resnet50-a100", "compute profile: "+strings.Join(profiles, ", "))
	fl.DurationVar(&cfg.ComputePerSample, "compute-per-sample", 0, "custom compute time per sample (e.g. 1ms), instead of --profile")
	fl.IntVar(&cfg.Concurrency, "concurrency", 64, "GETs in flight for s3:// paths (direct GETs)")
	fl.BoolVar(&cfg.FindMaxAccelerators, "find-max-accelerators", false, "search the largest accelerator count with AU >= --target-au")
	fl.Float64Var(&cfg.TargetAU, "target-au", 0.9, "AU target for --find-max-accelerators")
	fl.BoolVar(&cfg.DropCaches, "drop-caches", false, "drop the kernel page cache before each epoch (root only; warns otherwise)")
	fl.BoolVar(&cfg.PythonOpen, "python-open", false, "open files of directory paths as Python's open() does before 3.14: each open also asks isatty() (ioctl TCGETS), which costs a FUSE mount one request per file")
	fl.BoolVar(&cfg.Announce, "announce", false, "write each epoch's order to the dataccel mount's "+bench.ControlFile+" before the epoch")
	fl.DurationVar(&cfg.RTT, "rtt", 0, "store round-trip time for the bounds (default: probed from an s3:// path)")
	fl.StringVar(&bandwidth, "bandwidth", "", "store bandwidth for the bounds, bytes/s such as 1.2GB or bits/s such as 25Gbit (default: probed from an s3:// path)")
	fl.Float64Var(&cfg.RequestRate, "request-rate", 0, "store request rate limit for the bounds, requests/s (0: not a bound)")
	fl.BoolVar(&noProbe, "no-probe", false, "do not probe RTT and bandwidth from an s3:// path")
	fl.StringVar(&jsonFile, "json", "", "write the result as JSON to this file")
	fl.StringVar(&htmlFile, "html", "", "write a self-contained HTML report to this file")
	fl.BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	s3f.register(cmd)
	return cmd
}

// benchOutput is a report file bench run writes (--json, --html) with
// write; remove undoes its check.
type benchOutput struct {
	flag, path string
	write      func(*bench.Result, io.Writer) error
	remove     func()
}

// parseBandwidth reads bytes per second (1.2GB, 500MiB, with or without
// "/s") or bits per second (25Gbit, 10Gbps), as NICs are quoted. A unit
// in a lower-case b alone (25Gb) is refused: read as bytes it would be 8
// times what a NIC of that name carries.
func parseBandwidth(s string) (float64, error) {
	const want = "want bytes per second such as 1.2GB or 500MiB, or bits per second such as 25Gbit"
	v := strings.TrimSuffix(strings.TrimSpace(s), "/s")
	if strings.HasSuffix(v, "Bps") { // bytes per second: 1GBps
		v = strings.TrimSuffix(v, "ps")
	}
	lower := strings.ToLower(v)
	for _, unit := range []string{"bits", "bit", "bps"} {
		// "bit" in any case; "bps" in a lower-case b only (Bps is bytes).
		if strings.HasSuffix(lower, unit) && (unit != "bps" || strings.HasSuffix(v, unit)) {
			b, err := humanize.ParseBytes(v[:len(v)-len(unit)])
			if err != nil || b == 0 {
				return 0, errors.New(want)
			}
			return float64(b) / 8, nil
		}
	}
	if strings.HasSuffix(v, "b") {
		return 0, errors.New("a unit in a lower-case b is ambiguous: write B for bytes (25GB) or bit for bits (25Gbit)")
	}
	b, err := humanize.ParseBytes(v)
	if err != nil || b == 0 {
		return 0, errors.New(want)
	}
	return float64(b), nil
}

// checkOutput makes sure path can be written by opening it for writing,
// without changing what it holds; remove deletes what the check created.
func checkOutput(path string) (remove func(), err error) {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	f.Close()
	if errors.Is(statErr, fs.ErrNotExist) {
		return func() { os.Remove(path) }, nil
	}
	return func() {}, nil
}

// writeFile writes through write to path, reporting a failed close (a full
// disk shows up there).
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// newBenchCompareReportCmd is `dataccel bench compare-report`: the text and
// HTML views of the summary.json that bench/compare.sh writes.
func newBenchCompareReportCmd() *cobra.Command {
	var htmlFile string
	cmd := &cobra.Command{
		Use:   "compare-report SUMMARY.json",
		Short: "Print a comparison's summary (bench/compare.sh's summary.json) with each target met or missed, and write it as HTML",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			s, err := bench.ReadCompareSummary(f)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			if err := s.WriteText(cmd.OutOrStdout()); err != nil {
				return err
			}
			if htmlFile != "" {
				return writeFile(htmlFile, s.WriteHTML)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&htmlFile, "html", "", "write a self-contained HTML page (targets, charts) to this file")
	return cmd
}

// newScoreCmd is `dataccel score`.
func newScoreCmd() *cobra.Command {
	var (
		benchFile, offersFile, benchPath, jsonFile string
		in                                         bench.ScoreInput
	)
	cmd := &cobra.Command{
		Use:   "score --offers offers.yaml (--bench result.json | --io-factor F)",
		Short: "Rank GPU offers by cost per sample, with the I/O factor measured by bench",
		Long: `score computes for each offer the I/O factor F_io = E*T_compute/(k*T_cold + (E-k)*T_warm),
the goodput under preemption g = 1 - d/t - p*(R + t/2), the effective throughput
X_eff = X_compute*F_io*g, the cost per epoch and per 1M samples, and ranks the offers.
See bench/README.md and bench/offers.example.yaml.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if offersFile == "" {
				return usageError{errors.New("--offers is required")}
			}
			ioFactor := cmd.Flags().Changed("io-factor")
			switch {
			case (benchFile == "") == !ioFactor:
				return usageError{errors.New("give one of --bench result.json and --io-factor")}
			case ioFactor && !(in.IOFactor > 0 && in.IOFactor <= 1): // NaN too
				return usageError{fmt.Errorf("--io-factor %v: want a value in (0, 1]", in.IOFactor)}
			case in.Epochs < 1:
				return usageError{fmt.Errorf("--epochs %d: want at least 1", in.Epochs)}
			case in.ColdEpochs < 0 || in.ColdEpochs > in.Epochs:
				return usageError{fmt.Errorf("--cold-epochs %d: want 0..--epochs (0: a cache warmed before the job)", in.ColdEpochs)}
			case in.Samples < 0:
				return usageError{fmt.Errorf("--samples %d: want a count", in.Samples)}
			}
			of, err := os.Open(offersFile)
			if err != nil {
				return err
			}
			offers, err := bench.LoadOffers(of)
			of.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", offersFile, err)
			}
			in.Offers, in.BenchPath = offers.Offers, benchPath
			if benchFile != "" {
				bf, err := os.Open(benchFile)
				if err != nil {
					return err
				}
				in.Bench, err = bench.ReadResult(bf)
				bf.Close()
				if err != nil {
					return fmt.Errorf("%s: %w", benchFile, err)
				}
			}
			in = in.Resolved()
			scores, err := bench.Score(in)
			if err != nil {
				return err
			}
			werr := bench.WriteScoreTable(cmd.OutOrStdout(), scores, offers.Currency, in)
			if jsonFile != "" {
				werr = errors.Join(werr, writeFile(jsonFile, func(w io.Writer) error {
					return bench.WriteScoreJSON(w, scores, offers.Currency, in)
				}))
			}
			return werr
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&benchFile, "bench", "", "bench result (bench run --json)")
	fl.StringVar(&offersFile, "offers", "", "offers file (see bench/offers.example.yaml)")
	fl.StringVar(&benchPath, "path", "", "bench path that models the storage of offers without bench_path (default: the first)")
	fl.StringVar(&jsonFile, "json", "", "also write the ranking, with every formula value, as JSON to this file")
	fl.Float64Var(&in.IOFactor, "io-factor", 0, "F_io for every offer without its own io_factor, instead of a bench result")
	fl.IntVar(&in.Epochs, "epochs", 90, "E: epochs of the training job")
	fl.IntVar(&in.ColdEpochs, "cold-epochs", 1, "k: epochs that start with a cold cache (0: a cache warmed before the job)")
	fl.Int64Var(&in.Samples, "samples", 0, "samples per epoch (default: the bench's file count, else 1,281,167)")
	return cmd
}
