// Command s3local runs the project's local S3 server for the demo and the
// comparison scripts: versitygw on a free loopback port with fresh
// credentials (internal/testenv), optionally behind a delay line that adds a
// round trip to every request. It writes the S3_* settings to -env and runs
// until SIGINT/SIGTERM, then removes the server's data.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dataccel/dataccel/internal/testenv"
	"github.com/dataccel/dataccel/store/s3"
)

func main() {
	rtt := flag.Duration("rtt", 0, "round-trip delay added in front of the server (0: none)")
	envFile := flag.String("env", "", "write S3_* settings (shell syntax) to this file")
	bucket := flag.String("bucket", "demo", "bucket to create")
	flag.Parse()
	if err := run(*rtt, *envFile, *bucket); err != nil {
		fmt.Fprintln(os.Stderr, "s3local:", err)
		os.Exit(1)
	}
}

func run(rtt time.Duration, envFile, bucket string) error {
	srv, err := testenv.Start()
	if err != nil {
		return err
	}
	defer srv.Stop()
	cfg := srv.Config(bucket)
	st, err := s3.New(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.MakeBucket(ctx); err != nil {
		return err
	}
	endpoint := srv.Endpoint
	if rtt > 0 {
		p, err := testenv.StartDelayProxy(srv.Addr, rtt)
		if err != nil {
			return err
		}
		defer p.Close()
		endpoint = "http://" + p.Addr
	}
	env := fmt.Sprintf("S3_ENDPOINT=%s\nS3_BUCKET=%s\nS3_ROOT=%s/%s\nS3_RTT=%s\nAWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\nAWS_REGION=%s\n",
		endpoint, bucket, srv.Dir, bucket, rtt, srv.AccessKey, srv.SecretKey, srv.Region)
	if envFile != "" {
		if err := os.WriteFile(envFile, []byte(env), 0o600); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "s3local: serving bucket %q at %s (server %s, added rtt %s)\n", bucket, endpoint, srv.Endpoint, rtt)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	return nil
}
