package webhook

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// KeyPair serves a TLS certificate from files and reloads it when either
// file changes, so a rotated Secret (cert-manager, or a re-run of
// deploy/webhook/gen-cert.sh) takes effect without a restart.
type KeyPair struct {
	certFile, keyFile string
	logger            *slog.Logger

	mu    sync.Mutex
	cert  *tls.Certificate
	stamp string // modification times and sizes of both files at the last load
}

// NewKeyPair loads the pair once; a missing or bad pair is an error here.
func NewKeyPair(certFile, keyFile string, logger *slog.Logger) (*KeyPair, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	k := &KeyPair{certFile: certFile, keyFile: keyFile, logger: logger}
	stamp, err := k.currentStamp()
	if err != nil {
		return nil, err
	}
	if err := k.load(stamp); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *KeyPair) currentStamp() (string, error) {
	var s string
	for _, f := range []string{k.certFile, k.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("tls key pair: %w", err)
		}
		s += fmt.Sprintf("%d/%d;", fi.ModTime().UnixNano(), fi.Size())
	}
	return s, nil
}

func (k *KeyPair) load(stamp string) error {
	c, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		return fmt.Errorf("tls key pair %s, %s: %w", k.certFile, k.keyFile, err)
	}
	k.cert, k.stamp = &c, stamp
	return nil
}

// GetCertificate is for tls.Config.GetCertificate. When the files changed
// and the new pair does not load (for example, caught half-written), it
// keeps serving the previous pair and logs.
func (k *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	stamp, err := k.currentStamp()
	if err == nil && stamp != k.stamp {
		if err = k.load(stamp); err == nil {
			k.logger.Info("tls certificate reloaded", "cert", k.certFile, "at", time.Now().UTC().Format(time.RFC3339))
		}
	}
	if err != nil {
		k.logger.Warn("tls certificate reload failed; serving the previous one", "err", err)
	}
	return k.cert, nil
}
