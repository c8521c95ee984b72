package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/dataccel/dataccel/deploy"
	"github.com/dataccel/dataccel/webhook"
	"github.com/dataccel/dataccel/webhook/jsonpatch"
)

// parseArgs finds the subcommand args name with the real root command and
// parses its flags and positional arguments, without running it.
func parseArgs(args []string) error {
	root := newRootCmd()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return fmt.Errorf("args %q: %w", args, err)
	}
	if cmd == root || !cmd.Runnable() {
		return fmt.Errorf("args %q do not name a runnable subcommand", args)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return fmt.Errorf("%s: args %q: %w", cmd.CommandPath(), args, err)
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		return fmt.Errorf("%s: args %q: %w", cmd.CommandPath(), args, err)
	}
	return nil
}

func dataccelContainers(spec *corev1.PodSpec) []corev1.Container {
	var out []corev1.Container
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		if strings.Contains(c.Image, "dataccel/dataccel") {
			out = append(out, c)
		}
	}
	return out
}

// allManifests renders every kustomization and decodes every file that is
// not part of one (examples), keyed by where they came from.
func allManifests(t *testing.T) map[string][]deploy.Object {
	t.Helper()
	fsys := deploy.Files()
	dirs, err := deploy.Kustomizations(fsys)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]deploy.Object{}
	for _, d := range dirs {
		if out[d], err = deploy.Render(fsys, d); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"webhook/example-job.yaml", "overlays/bench-imagenet/reports-pod.yaml"} {
		if out[f], err = deploy.DecodeFile(fsys, f); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestDeployArgsParse: every container of deploy/ that runs dataccel passes
// arguments the binary accepts.
func TestDeployArgsParse(t *testing.T) {
	n := 0
	for src, objs := range allManifests(t) {
		for _, o := range objs {
			spec := deploy.PodSpec(o.Typed)
			if spec == nil {
				continue
			}
			ns := o.Typed.(interface{ GetNamespace() string }).GetNamespace()
			for _, c := range dataccelContainers(spec) {
				t.Run(src+"/"+o.Name()+"/"+c.Name, func(t *testing.T) {
					args, err := deploy.ExpandArgs(c, ns, objs)
					if err != nil {
						t.Fatal(err)
					}
					if err := parseArgs(args); err != nil {
						t.Fatal(err)
					}
				})
				n++
			}
		}
	}
	// base sidecar, bench overlay (gen, sidecar, run), webhook.
	if n != 5 {
		t.Fatalf("checked %d dataccel containers, want 5", n)
	}
}

// TestParseArgsFails: the check above can fail.
func TestParseArgsFails(t *testing.T) {
	for _, args := range [][]string{
		{"mount", "s3://b/p", "/data", "--no-such-flag"},
		{"mount", "s3://b/p"},
		{"webhook", "--listen"},
		{"nosuchcommand"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if err := parseArgs(args); err == nil {
				t.Fatalf("args %q parsed", args)
			}
		})
	}
}

// TestWebhookSidecarArgsParse: the webhook, configured by its Deployment's
// args, injects into the example Job's pod a sidecar whose args the binary
// accepts.
func TestWebhookSidecarArgsParse(t *testing.T) {
	all := allManifests(t)
	var wargs []string
	for _, o := range all["webhook"] {
		if spec := deploy.PodSpec(o.Typed); spec != nil && o.Kind() == "Deployment" {
			wargs = spec.Containers[0].Args
		}
	}
	root := newRootCmd()
	cmd, rest, err := root.Find(wargs)
	if err != nil || cmd.Name() != "webhook" {
		t.Fatalf("webhook deployment args %q: %v", wargs, err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatal(err)
	}
	cfg, err := webhookConfigFromFlags(cmd.Flags())
	if err != nil {
		t.Fatal(err)
	}
	job, ok := all["webhook/example-job.yaml"][0].Typed.(*batchv1.Job)
	if !ok {
		t.Fatal("example-job.yaml is not a Job")
	}
	pod := &corev1.Pod{ObjectMeta: job.Spec.Template.ObjectMeta, Spec: job.Spec.Template.Spec}
	sidecar := injectedSidecar(t, cfg, pod)
	if err := parseArgs(sidecar.Args); err != nil {
		t.Fatal(err)
	}
	// A prefix with characters a URL gives a meaning to reaches the
	// sidecar as it was annotated.
	for _, prefix := range []string{"runs#2/a%b?c/", "a b/100%/"} {
		p := pod.DeepCopy()
		p.Annotations[webhook.AnnotationPrefix] = prefix
		args := injectedSidecar(t, cfg, p).Args
		if err := parseArgs(args); err != nil {
			t.Fatal(err)
		}
		if bucket, got, err := parseS3URL(args[1]); err != nil || bucket != p.Annotations[webhook.AnnotationBucket] || got != prefix {
			t.Errorf("prefix %q: the sidecar mounts %s (bucket %q, prefix %q, %v)", prefix, args[1], bucket, got, err)
		}
	}
}

// injectedSidecar applies the webhook's patch to pod as the API server
// would, with no unknown field, and returns the one sidecar it added.
func injectedSidecar(t *testing.T, cfg webhook.Config, pod *corev1.Pod) *corev1.Container {
	t.Helper()
	ops, result, err := cfg.Mutate(pod)
	if err != nil || result != webhook.Injected {
		t.Fatalf("Mutate: %s, %v", result, err)
	}
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := jsonpatch.ApplyJSON(doc, patch)
	if err != nil {
		t.Fatal(err)
	}
	var out corev1.Pod
	dec := json.NewDecoder(strings.NewReader(string(patched)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatal(err)
	}
	var sidecar *corev1.Container
	for i, c := range out.Spec.InitContainers {
		if c.Name == webhook.SidecarName {
			if sidecar != nil {
				t.Fatal("two sidecars")
			}
			sidecar = &out.Spec.InitContainers[i]
		}
	}
	if sidecar == nil {
		t.Fatal("no sidecar injected")
	}
	return sidecar
}

// freeAddr returns a loopback address with a port that was free just now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// selfSigned writes a certificate for 127.0.0.1 and its key into dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dataccel-webhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
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
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestWebhookCommandServes runs `dataccel webhook` in-process over real
// TLS, sends it an AdmissionReview, checks the ops endpoints, and stops it
// with the context (as SIGTERM does).
func TestWebhookCommandServes(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	listen, ops := freeAddr(t), freeAddr(t)
	root := newRootCmd()
	root.SetArgs([]string{"webhook", "--listen=" + listen, "--tls-cert=" + certFile, "--tls-key=" + keyFile,
		"--http=" + ops, "--image=ghcr.io/dataccel/dataccel:test", "--log-level=error", "--shutdown-delay=3s"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("webhook exited with %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("webhook did not stop")
		}
	}()

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	pod := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "trainer", Image: "busybox"}}}}
	pod.Annotations = map[string]string{webhook.AnnotationInject: "true", webhook.AnnotationBucket: "datasets"}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	review, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "u1", Operation: admissionv1.Create,
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Object:   runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var resp *http.Response
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err = client.Post("https://"+listen+webhook.PathMutate, "application/json", bytes.NewReader(review))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &out); err != nil || out.Response == nil {
		t.Fatalf("response %s: %v", body, err)
	}
	if !out.Response.Allowed || len(out.Response.Patch) == 0 || out.Response.UID != "u1" {
		t.Fatalf("response %+v: want allowed with a patch", out.Response)
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		r, err := http.Get("http://" + ops + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", p, r.StatusCode)
		}
		if p == "/metrics" && !strings.Contains(string(b), `dataccel_webhook_admissions_total{result="injected"} 1`) {
			t.Fatalf("/metrics lacks the admission counter:\n%s", b)
		}
		if p == "/metrics" {
			for _, line := range strings.Split(string(b), "\n") {
				if line != "" && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "dataccel_") {
					t.Fatalf("metric not named dataccel_*: %s", line)
				}
			}
		}
	}

	// SIGTERM: reviews are still answered during --shutdown-delay (the
	// API server calls the pod until its endpoints drop it), /readyz fails.
	stopped := time.Now()
	cancel()
	resp, err = client.Post("https://"+listen+webhook.PathMutate, "application/json", bytes.NewReader(review))
	if err != nil {
		t.Fatalf("a review right after SIGTERM: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a review right after SIGTERM: %d", resp.StatusCode)
	}
	if r, err := http.Get("http://" + ops + "/readyz"); err != nil || r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz after SIGTERM: %v %v, want 503", r, err)
	}
	select {
	case err := <-done:
		done <- err // for the deferred check
		if took := time.Since(stopped); took < 2*time.Second {
			t.Errorf("stopped %s after SIGTERM, before --shutdown-delay 3s", took)
		}
	case <-time.After(15 * time.Second):
	}
}

func TestWebhookCommandUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no tls", []string{"webhook", "--image=x"}, "--tls-cert and --tls-key are required"},
		{"no image", []string{"webhook", "--tls-cert=a", "--tls-key=b"}, "--image is required"},
		{"bad default size", []string{"webhook", "--image=x", "--tls-cert=a", "--tls-key=b", "--cache-size=lots"}, "cache-size"},
		{"missing cert file", []string{"webhook", "--image=x", "--tls-cert=/nonexistent/a", "--tls-key=/nonexistent/b"}, "no such file"},
		{"negative shutdown delay", []string{"webhook", "--image=x", "--tls-cert=a", "--tls-key=b", "--shutdown-delay=-1s"}, "--shutdown-delay -1s: want 0 or more"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := execCmd(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
