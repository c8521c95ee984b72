package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/dataccel/dataccel/serve"
	"github.com/dataccel/dataccel/webhook"
)

type webhookFlags struct {
	listen, tlsCert, tlsKey, http string
	pullPolicy                    string
	cfg                           webhook.Config
	sidecarHTTPPort               int
}

// newWebhookCmd is `dataccel webhook`: the mutating admission webhook that
// injects the dataccel sidecar into pods annotated dataccel.io/inject.
func newWebhookCmd(logger *slog.Logger) *cobra.Command {
	var f webhookFlags
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Serve the Kubernetes mutating admission webhook that injects the dataccel sidecar",
		Long: `Serve the Kubernetes mutating admission webhook (HTTPS, POST ` + webhook.PathMutate + `) that
injects the dataccel sidecar, its volumes and the dataset mount into pods annotated
` + webhook.AnnotationInject + `: "true". See deploy/README.md for the annotations and the TLS setup.
The certificate files are re-read when they change (rotation needs no restart).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWebhook(cmd.Context(), logger, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", ":8443", "HTTPS listen address for admission reviews")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "TLS certificate file (PEM), e.g. tls.crt of a kubernetes.io/tls Secret")
	fl.StringVar(&f.tlsKey, "tls-key", "", "TLS private key file (PEM)")
	fl.StringVar(&f.http, "http", "", "plain-HTTP address for /healthz, /readyz and /metrics (empty: off)")
	fl.StringVar(&f.cfg.Image, "image", "", "dataccel image the sidecar runs (required)")
	fl.StringVar(&f.pullPolicy, "image-pull-policy", string(corev1.PullIfNotPresent), "sidecar image pull policy: Always, IfNotPresent, Never")
	fl.StringVar(&f.cfg.Endpoint, "endpoint", "", "default S3 endpoint URL for sidecars (empty: AWS S3); a pod may override it with "+webhook.AnnotationEndpoint)
	fl.StringVar(&f.cfg.Region, "region", "", "S3 region passed to sidecars (empty: the binary's default)")
	fl.StringVar(&f.cfg.Secret, "secret", webhook.DefaultSecret, "default Secret (in the pod's namespace) with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; a pod may override it with "+webhook.AnnotationSecret)
	fl.StringVar(&f.cfg.CacheHostPath, "cache-host-path", webhook.DefaultCacheHostPath, "node-local NVMe directory for caches (one subdirectory per bucket/prefix)")
	fl.StringVar(&f.cfg.CacheSize, "cache-size", webhook.DefaultCacheSize, "default NVMe cache size per pod ("+webhook.AnnotationCacheSize+" overrides)")
	fl.StringVar(&f.cfg.RAMCacheSize, "ram-cache-size", webhook.DefaultRAMCacheSize, "default RAM cache size per pod ("+webhook.AnnotationRAMCacheSize+" overrides); sizes the sidecar's memory")
	fl.StringVar(&f.cfg.MountPath, "mount-path", webhook.DefaultMountPath, "default dataset path in the containers ("+webhook.AnnotationMountPath+" overrides)")
	fl.IntVar(&f.cfg.MaxInflight, "max-inflight", webhook.DefaultMaxInflight, "sidecar --max-inflight (concurrent GETs)")
	fl.IntVar(&f.sidecarHTTPPort, "sidecar-http-port", webhook.DefaultHTTPPort, "port of the sidecar's /metrics, /healthz and /readyz")
	fl.StringVar(&f.cfg.MetadataTTL, "metadata-ttl", webhook.DefaultMetadataTTL, "sidecar --metadata-ttl")
	return cmd
}

func runWebhook(ctx context.Context, logger *slog.Logger, f webhookFlags) error {
	if f.tlsCert == "" || f.tlsKey == "" {
		return usageError{errors.New("--tls-cert and --tls-key are required (the API server only calls webhooks over HTTPS)")}
	}
	if f.sidecarHTTPPort < 1 || f.sidecarHTTPPort > 65535 {
		return usageError{fmt.Errorf("--sidecar-http-port %d: out of range", f.sidecarHTTPPort)}
	}
	f.cfg.HTTPPort = int32(f.sidecarHTTPPort)
	f.cfg.ImagePullPolicy = corev1.PullPolicy(f.pullPolicy)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h, err := webhook.NewHandler(f.cfg, logger, reg)
	if err != nil {
		return usageError{err}
	}
	kp, err := webhook.NewKeyPair(f.tlsCert, f.tlsKey, logger)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("webhook: listen on %s: %w", f.listen, err)
	}
	mux := http.NewServeMux()
	mux.Handle(webhook.PathMutate, h)
	srv := &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{GetCertificate: kp.GetCertificate, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	var ops *serve.Server
	if f.http != "" {
		ops = serve.New(f.http, reg, nil, logger)
		if err := ops.Start(); err != nil {
			ln.Close()
			return err
		}
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()
	logger.Info("webhook serving", "addr", ln.Addr().String(), "path", webhook.PathMutate, "image", f.cfg.Image)

	var serveErr error
	select {
	case <-ctx.Done():
		logger.Info("signal received, shutting down webhook")
	case serveErr = <-served:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shutErr := srv.Shutdown(sctx)
	if ops != nil {
		shutErr = errors.Join(shutErr, ops.Shutdown(sctx))
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("webhook: serve: %w", serveErr)
	}
	return shutErr
}
