package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/dataccel/dataccel/serve"
	"github.com/dataccel/dataccel/webhook"
)

// newWebhookCmd is `dataccel webhook`: the mutating admission webhook that
// injects the dataccel sidecar into pods annotated dataccel.io/inject.
func newWebhookCmd(logger *slog.Logger) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhook --tls-cert FILE --tls-key FILE --image IMAGE",
		Short: "Serve the Kubernetes mutating admission webhook that injects the dataccel sidecar",
		Long: `Serve the Kubernetes mutating admission webhook (HTTPS, POST ` + webhook.PathMutate + `) that
injects the dataccel sidecar, its volumes and the dataset mount into pods annotated
` + webhook.AnnotationInject + `: "true". See deploy/README.md for the annotations and the TLS setup.
The certificate files are re-read when they change (rotation needs no restart).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := webhookConfigFromFlags(cmd.Flags())
			if err != nil {
				return err
			}
			fl := cmd.Flags()
			listen, _ := fl.GetString("listen")
			cert, _ := fl.GetString("tls-cert")
			key, _ := fl.GetString("tls-key")
			httpAddr, _ := fl.GetString("http")
			delay, _ := fl.GetDuration("shutdown-delay")
			if delay < 0 {
				return usageError{fmt.Errorf("--shutdown-delay %s: want 0 or more", delay)}
			}
			return runWebhook(cmd.Context(), logger, cfg, listen, cert, key, httpAddr, delay)
		},
	}
	fl := cmd.Flags()
	fl.String("listen", ":8443", "HTTPS listen address for admission reviews")
	fl.String("tls-cert", "", "TLS certificate file (PEM), e.g. tls.crt of a kubernetes.io/tls Secret")
	fl.String("tls-key", "", "TLS private key file (PEM)")
	fl.String("http", "", "plain-HTTP address for /healthz, /readyz and /metrics (empty: off)")
	fl.Duration("shutdown-delay", 5*time.Second, "after SIGTERM, how long to go on serving (with /readyz failing) before stopping: the API server keeps calling a pod until its endpoints drop it, and a refused call fails the pod's creation")
	fl.String("image", "", "dataccel image the sidecar runs (required)")
	fl.String("image-pull-policy", string(corev1.PullIfNotPresent), "sidecar image pull policy: Always, IfNotPresent, Never")
	fl.String("endpoint", "", "default S3 endpoint URL for sidecars (empty: AWS S3); a pod may override it with "+webhook.AnnotationEndpoint)
	fl.String("region", "", "default S3 region of sidecars; a pod may set its own with "+webhook.AnnotationRegion+" (empty: the binary's default)")
	fl.String("secret", webhook.DefaultSecret, "default Secret (in the pod's namespace) with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; a pod may override it with "+webhook.AnnotationSecret)
	fl.String("credentials", "secret", "where sidecars' keys come from by default: secret (the Secret above) or pod (the pod's IRSA or EKS Pod Identity, else the node's instance profile); a pod may choose with "+webhook.AnnotationCredentials)
	fl.String("cache-host-path", webhook.DefaultCacheHostPath, "node-local NVMe directory for caches (one subdirectory per bucket/prefix)")
	fl.String("cache-size", webhook.DefaultCacheSize, "default NVMe cache size per pod ("+webhook.AnnotationCacheSize+" overrides)")
	fl.String("ram-cache-size", webhook.DefaultRAMCacheSize, "default RAM cache size per pod ("+webhook.AnnotationRAMCacheSize+" overrides); sizes the sidecar's memory")
	fl.String("mount-path", webhook.DefaultMountPath, "default dataset path in the containers ("+webhook.AnnotationMountPath+" overrides)")
	fl.Int("max-inflight", webhook.DefaultMaxInflight, "sidecar --max-inflight (concurrent GETs)")
	fl.Int("sidecar-http-port", webhook.DefaultHTTPPort, "default port of the sidecar's /metrics, /healthz and /readyz; a pod may set its own with "+webhook.AnnotationHTTPPort+" (hostNetwork pods must)")
	fl.String("metadata-ttl", webhook.DefaultMetadataTTL, "sidecar --metadata-ttl")
	fl.String("outage-grace", webhook.DefaultOutageGrace, "sidecar --outage-grace (how long past --metadata-ttl listings serve while the store cannot be reached)")
	return cmd
}

// webhookConfigFromFlags builds and validates the sidecar configuration
// from the parsed flags of the webhook command.
func webhookConfigFromFlags(fl *pflag.FlagSet) (webhook.Config, error) {
	str := func(name string) string { v, _ := fl.GetString(name); return v }
	maxInflight, _ := fl.GetInt("max-inflight")
	port, _ := fl.GetInt("sidecar-http-port")
	if port < 1 || port > 65535 {
		return webhook.Config{}, usageError{fmt.Errorf("--sidecar-http-port %d: out of range", port)}
	}
	cfg := webhook.Config{
		Image:           str("image"),
		ImagePullPolicy: corev1.PullPolicy(str("image-pull-policy")),
		Endpoint:        str("endpoint"),
		Region:          str("region"),
		Secret:          str("secret"),
		Credentials:     str("credentials"),
		CacheHostPath:   str("cache-host-path"),
		CacheSize:       str("cache-size"),
		RAMCacheSize:    str("ram-cache-size"),
		MountPath:       str("mount-path"),
		MaxInflight:     maxInflight,
		HTTPPort:        int32(port),
		MetadataTTL:     str("metadata-ttl"),
		OutageGrace:     str("outage-grace"),
	}.WithDefaults()
	if cfg.Image == "" {
		return cfg, usageError{errors.New("--image is required: the dataccel image injected sidecars run")}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}

func runWebhook(ctx context.Context, logger *slog.Logger, cfg webhook.Config, listen, certFile, keyFile, httpAddr string, shutdownDelay time.Duration) error {
	if certFile == "" || keyFile == "" {
		return usageError{errors.New("--tls-cert and --tls-key are required (the API server only calls webhooks over HTTPS)")}
	}
	// Only dataccel_* metrics, as everywhere in the binary.
	reg := prometheus.NewRegistry()
	h, err := webhook.NewHandler(cfg, logger, reg)
	if err != nil {
		return usageError{err}
	}
	kp, err := webhook.NewKeyPair(certFile, keyFile, logger)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("webhook: listen on %s: %w", listen, err)
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
	var stopping atomic.Bool
	if httpAddr != "" {
		ops = serve.New(httpAddr, reg, func(context.Context) error {
			if stopping.Load() {
				return errors.New("shutting down")
			}
			return nil
		}, logger)
		if err := ops.Start(); err != nil {
			ln.Close()
			return err
		}
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()
	logger.Info("webhook serving", "addr", ln.Addr().String(), "path", webhook.PathMutate, "image", cfg.Image)

	var serveErr error
	select {
	case <-ctx.Done():
		// Until the Service's endpoints drop this pod the API server still
		// sends it reviews (failurePolicy Fail refuses the pod on a refused
		// call): go on answering them, unready, for a while.
		logger.Info("signal received, shutting down webhook", "serving_for", shutdownDelay)
		stopping.Store(true)
		select {
		case <-time.After(shutdownDelay):
		case serveErr = <-served:
		}
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
