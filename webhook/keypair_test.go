package webhook_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dataccel/dataccel/webhook"
)

// writePair writes a self-signed pair for cn and sets both files' mtime.
func writePair(t *testing.T, dir, cn string, mtime time.Time) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{cn},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func(p string, b []byte) {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	write(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	write(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	return certFile, keyFile
}

func leafCN(t *testing.T, c *tls.Certificate) string {
	t.Helper()
	x, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return x.Subject.CommonName
}

func TestKeyPairReload(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Now().Add(-time.Minute)
	certFile, keyFile := writePair(t, dir, "first.example", t0)
	kp, err := webhook.NewKeyPair(certFile, keyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	get := func() string {
		c, err := kp.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return leafCN(t, c)
	}
	if got := get(); got != "first.example" {
		t.Fatalf("serving %s", got)
	}
	writePair(t, dir, "second.example", t0.Add(time.Second))
	if got := get(); got != "second.example" {
		t.Fatalf("after rotation serving %s, want second.example", got)
	}
	// A half-written pair keeps the previous certificate.
	if err := os.WriteFile(keyFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := get(); got != "second.example" {
		t.Fatalf("after a bad write serving %s, want second.example", got)
	}
}

func TestNewKeyPairErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, cert, key string }{
		{"missing", filepath.Join(dir, "none.crt"), filepath.Join(dir, "none.key")},
		{"not PEM", bad, bad},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := webhook.NewKeyPair(tt.cert, tt.key, nil); err == nil {
				t.Fatal("want error")
			}
		})
	}
}
