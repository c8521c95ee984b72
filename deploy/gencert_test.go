package deploy_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/dataccel/dataccel/deploy"
	"github.com/dataccel/dataccel/internal/testenv"
	"github.com/dataccel/dataccel/webhook/jsonpatch"
)

// gen-cert.sh talks to a cluster through kubectl. The tests run it against
// a fake kubectl, this test binary under the name "kubectl", which keeps
// objects as JSON files in the directory named by fakeKubectlEnv and
// implements only the calls the script makes (anything else fails, so a
// new call must be added here, on purpose).
const (
	fakeKubectlEnv     = "DATACCEL_TEST_FAKE_KUBECTL"
	fakeKubectlFailEnv = "DATACCEL_TEST_FAKE_KUBECTL_FAIL" // "VERB RESOURCE" that fails as an unreachable server would
	fakeLog            = "calls.log"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(fakeKubectlEnv); dir != "" && filepath.Base(os.Args[0]) == "kubectl" {
		if err := fakeKubectl(dir, os.Args[1:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var errNotFound = errors.New("NotFound")

// resourceKinds maps the resources the script names to kinds.
var resourceKinds = map[string]string{
	"namespace":                    "Namespace",
	"secret":                       "Secret",
	"mutatingwebhookconfiguration": "MutatingWebhookConfiguration",
}

func objectFile(dir, kind, ns, name string) string {
	return filepath.Join(dir, strings.ToLower(kind)+"_"+ns+"_"+name+".json")
}

func namespaced(kind string) bool { return kind == "Secret" }

func fakeKubectl(dir string, args []string, stdin io.Reader, stdout io.Writer) error {
	var pos []string
	flags := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch name {
		case "ignore-not-found":
			val = "true"
		case "n", "namespace", "o", "output", "p", "patch", "f", "filename", "type", "cert", "key", "dry-run":
			if !hasVal {
				if i+1 == len(args) {
					return fmt.Errorf("flag %s needs a value", a)
				}
				i++
				val = args[i]
			}
		default:
			return fmt.Errorf("fake kubectl: unsupported flag %s", a)
		}
		for long, short := range map[string]string{"namespace": "n", "output": "o", "patch": "p", "filename": "f"} {
			if name == long {
				name = short
			}
		}
		flags[name] = val
	}
	if len(pos) == 0 {
		return fmt.Errorf("fake kubectl: unsupported call %q", args)
	}
	verb, resource := pos[0], ""
	if len(pos) > 1 {
		resource = pos[1]
	}
	call := strings.Join(pos[:min(len(pos), 3)], " ")
	logf, err := os.OpenFile(filepath.Join(dir, fakeLog), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintln(logf, call)
	if f := os.Getenv(fakeKubectlFailEnv); f != "" && strings.HasPrefix(call, f) {
		return errors.New("Unable to connect to the server: dial tcp: i/o timeout")
	}
	switch {
	case verb == "get" && len(pos) == 3:
		return fakeGet(dir, pos[1], pos[2], flags, stdout)
	case verb == "create" && resource == "namespace" && len(pos) == 3:
		return store(dir, map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": pos[2]}})
	case verb == "create" && resource == "secret" && len(pos) == 4 && pos[2] == "tls":
		return fakeCreateTLS(pos[3], flags, stdout)
	case verb == "apply" && len(pos) == 1 && flags["f"] == "-":
		return fakeApply(dir, stdin, stdout, logf)
	case verb == "patch" && resource == "mutatingwebhookconfiguration" && len(pos) == 3 && flags["type"] == "json":
		return fakePatch(dir, pos[2], flags["p"])
	}
	return fmt.Errorf("fake kubectl: unsupported call %q", args)
}

func load(dir, kind, ns, name string) (map[string]any, error) {
	b, err := os.ReadFile(objectFile(dir, kind, ns, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s %q: %w", kind, name, errNotFound)
	}
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	return obj, json.Unmarshal(b, &obj)
}

// store writes obj after decoding it strictly into its type, as the API
// server would validate it (a caBundle that is not base64 fails here).
func store(dir string, obj map[string]any) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	kind, _ := obj["kind"].(string)
	var typed any
	switch kind {
	case "Namespace":
		typed = &corev1.Namespace{}
	case "Secret":
		typed = &corev1.Secret{}
	case "MutatingWebhookConfiguration":
		typed = &admissionregistrationv1.MutatingWebhookConfiguration{}
	default:
		return fmt.Errorf("fake kubectl: kind %q", kind)
	}
	if err := yaml.UnmarshalStrict(b, typed); err != nil {
		return fmt.Errorf("%s is invalid: %w", kind, err)
	}
	m := typed.(metav1.Object)
	ns := m.GetNamespace()
	if namespaced(kind) {
		if ns == "" {
			return fmt.Errorf("%s %s has no namespace", kind, m.GetName())
		}
		if _, err := load(dir, "Namespace", "", ns); err != nil {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	return os.WriteFile(objectFile(dir, kind, ns, m.GetName()), b, 0o600)
}

func fakeGet(dir, resource, name string, flags map[string]string, stdout io.Writer) error {
	kind, ok := resourceKinds[resource]
	if !ok {
		return fmt.Errorf("fake kubectl: resource %q", resource)
	}
	ns := ""
	if namespaced(kind) {
		ns = flags["n"]
	}
	obj, err := load(dir, kind, ns, name)
	if errors.Is(err, errNotFound) && flags["ignore-not-found"] == "true" {
		return nil
	}
	if err != nil {
		return err
	}
	switch out := flags["o"]; {
	case out == "":
		fmt.Fprintf(stdout, "NAME\n%s\n", name)
	case out == "name":
		fmt.Fprintf(stdout, "%s/%s\n", resource, name)
	case strings.HasPrefix(out, "jsonpath="):
		v, err := jsonPath(obj, strings.TrimPrefix(out, "jsonpath="))
		if err != nil {
			return err
		}
		fmt.Fprint(stdout, v)
	default:
		return fmt.Errorf("fake kubectl: output %q", out)
	}
	return nil
}

// jsonPath evaluates the {.a.b\.c[0].d} expressions the script uses; a
// missing field is "", as kubectl prints it.
func jsonPath(obj any, expr string) (string, error) {
	e, okPrefix := strings.CutPrefix(expr, "{.")
	e, okSuffix := strings.CutSuffix(e, "}")
	if !okPrefix || !okSuffix {
		return "", fmt.Errorf("fake kubectl: jsonpath %q", expr)
	}
	var toks []string
	var cur strings.Builder
	for i := 0; i < len(e); i++ {
		switch {
		case e[i] == '\\' && i+1 < len(e):
			i++
			cur.WriteByte(e[i])
		case e[i] == '.':
			toks, cur = append(toks, cur.String()), strings.Builder{}
		default:
			cur.WriteByte(e[i])
		}
	}
	v := obj
	for _, tok := range append(toks, cur.String()) {
		name, idx, hasIdx := strings.Cut(tok, "[")
		m, _ := v.(map[string]any)
		v = m[name]
		if hasIdx {
			n, err := strconv.Atoi(strings.TrimSuffix(idx, "]"))
			if err != nil {
				return "", fmt.Errorf("fake kubectl: jsonpath %q", expr)
			}
			l, _ := v.([]any)
			if n >= len(l) {
				return "", nil
			}
			v = l[n]
		}
	}
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	default:
		b, err := json.Marshal(x)
		return string(b), err
	}
}

func fakeCreateTLS(name string, flags map[string]string, stdout io.Writer) error {
	if flags["dry-run"] != "client" || flags["o"] != "yaml" || flags["n"] == "" {
		return fmt.Errorf("fake kubectl: create secret tls only with -n, --dry-run=client -o yaml")
	}
	// kubectl checks the pair too.
	if _, err := tls.LoadX509KeyPair(flags["cert"], flags["key"]); err != nil {
		return fmt.Errorf("failed to load key pair: %w", err)
	}
	crt, err := os.ReadFile(flags["cert"])
	if err != nil {
		return err
	}
	key, err := os.ReadFile(flags["key"])
	if err != nil {
		return err
	}
	s := corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: flags["n"]},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key},
	}
	b, err := yaml.Marshal(s)
	if err != nil {
		return err
	}
	_, err = stdout.Write(b)
	return err
}

func fakeApply(dir string, stdin io.Reader, stdout, logf io.Writer) error {
	b, err := io.ReadAll(stdin)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return errors.New("no objects passed to apply")
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		return err
	}
	md, _ := obj["metadata"].(map[string]any)
	fmt.Fprintf(logf, "applied %v %v\n", obj["kind"], md["name"])
	if err := store(dir, obj); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%v/%v configured\n", strings.ToLower(fmt.Sprint(obj["kind"])), md["name"])
	return nil
}

func fakePatch(dir, name, patch string) error {
	obj, err := load(dir, "MutatingWebhookConfiguration", "", name)
	if err != nil {
		return err
	}
	doc, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	out, err := jsonpatch.ApplyJSON(doc, []byte(patch))
	if err != nil {
		return err
	}
	var patched map[string]any
	if err := json.Unmarshal(out, &patched); err != nil {
		return err
	}
	return store(dir, patched)
}

// cluster is the fake cluster's state: the deploy/webhook manifests
// applied, and what gen-cert.sh stored.
type cluster struct {
	dir, bin string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{dir: t.TempDir(), bin: t.TempDir()}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(exe, filepath.Join(c.bin, "kubectl")); err != nil {
		t.Fatal(err)
	}
	objs, err := deploy.Render(deploy.Files(), "webhook")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if k := o.Kind(); k == "Namespace" || k == "MutatingWebhookConfiguration" {
			var m map[string]any
			if err := json.Unmarshal(o.JSON, &m); err != nil {
				t.Fatal(err)
			}
			if err := store(c.dir, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	return c
}

// genCert runs the script against c, with env added ("K=V"), and returns
// its output and the kubectl calls it made.
func (c *cluster) genCert(t *testing.T, env []string, args ...string) (string, []string, error) {
	t.Helper()
	for _, tool := range []string{"sh", "openssl", "awk"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, "gen-cert.sh needs %s: %v", tool, err)
		}
	}
	script, err := filepath.Abs(filepath.Join("webhook", "gen-cert.sh"))
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(c.dir, fakeLog))
	cmd := exec.Command("sh", append([]string{script}, args...)...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PATH="+c.bin+string(os.PathListSeparator)+os.Getenv("PATH"), fakeKubectlEnv+"="+c.dir)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	calls, _ := os.ReadFile(filepath.Join(c.dir, fakeLog))
	return string(out), strings.Split(strings.TrimSpace(string(calls)), "\n"), err
}

// state is what the API server and the webhook would see.
type state struct {
	ca, caKey      []byte // the CA's Secret
	serving, key   []byte // the webhook's Secret
	bundle         []byte // the configuration's caBundle (PEM)
	bundleSubjects []string
}

func (c *cluster) state(t *testing.T) state {
	t.Helper()
	var s state
	secret := func(name string) (crt, key []byte) {
		obj, err := load(c.dir, "Secret", "dataccel-system", name)
		if errors.Is(err, errNotFound) {
			return nil, nil
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(obj)
		var sec corev1.Secret
		if err := json.Unmarshal(b, &sec); err != nil {
			t.Fatal(err)
		}
		return sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey]
	}
	s.ca, s.caKey = secret("dataccel-webhook-ca")
	s.serving, s.key = secret("dataccel-webhook-tls")
	obj, err := load(c.dir, "MutatingWebhookConfiguration", "", "dataccel-sidecar-injector")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(obj)
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := json.Unmarshal(b, &mwc); err != nil {
		t.Fatal(err)
	}
	s.bundle = mwc.Webhooks[0].ClientConfig.CABundle
	for _, crt := range certs(t, s.bundle) {
		s.bundleSubjects = append(s.bundleSubjects, crt.Subject.CommonName)
	}
	return s
}

func certs(t *testing.T, pemBytes []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, pemBytes = pem.Decode(pemBytes)
		if b == nil {
			return out
		}
		crt, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, crt)
	}
}

// trusts says whether the API server, holding bundle, accepts the serving
// certificate servingPEM for the webhook's Service.
func trusts(t *testing.T, bundle, servingPEM []byte) error {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		return errors.New("empty caBundle")
	}
	leaf := certs(t, servingPEM)
	if len(leaf) != 1 {
		return fmt.Errorf("%d certificates in tls.crt, want 1", len(leaf))
	}
	_, err := leaf[0].Verify(x509.VerifyOptions{
		DNSName: "dataccel-webhook.dataccel-system.svc", Roots: pool,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	return err
}

func subjectOf(t *testing.T, pemBytes []byte) string {
	t.Helper()
	c := certs(t, pemBytes)
	if len(c) == 0 {
		return ""
	}
	return c[0].Subject.CommonName
}

// TestGenCertKeepsCA: a re-run renews the serving certificate from the CA
// the caBundle already trusts, without touching the caBundle; a CA
// rotation trusts old and new CA during the switch; a failing kubectl
// never passes for "no CA yet".
func TestGenCertKeepsCA(t *testing.T) {
	c := newCluster(t)
	type step struct {
		name    string
		env     []string
		args    []string
		wantErr string
		check   func(t *testing.T, before, after state, calls []string)
	}
	// servedWhileSwitching: the certificate served before the run and the
	// one stored by it are both trusted by the caBundle from the run on, and
	// the new one by the caBundle as it was before the run when that is
	// kept: no moment where the API server distrusts the webhook.
	servedWhileSwitching := func(t *testing.T, before, after state) {
		t.Helper()
		if err := trusts(t, after.bundle, after.serving); err != nil {
			t.Fatalf("the new certificate is not trusted by the new caBundle: %v", err)
		}
		if before.serving != nil {
			if err := trusts(t, after.bundle, before.serving); err != nil {
				t.Fatalf("the certificate served until the kubelet refreshes the Secret is not trusted by the new caBundle: %v", err)
			}
		}
	}
	unchangedBundle := func(t *testing.T, before, after state, calls []string) {
		t.Helper()
		if !bytes.Equal(before.bundle, after.bundle) || slices.ContainsFunc(calls, func(s string) bool { return strings.HasPrefix(s, "patch") }) {
			t.Fatalf("caBundle changed (%v -> %v; calls %q), want it untouched", before.bundleSubjects, after.bundleSubjects, calls)
		}
	}
	keptCA := func(t *testing.T, before, after state) {
		t.Helper()
		if after.ca == nil || after.caKey == nil || !slices.Equal(after.bundleSubjects[len(after.bundleSubjects)-1:], []string{subjectOf(t, after.ca)}) {
			t.Fatalf("the CA's Secret holds %q, want the caBundle's CA (%v) and its key", subjectOf(t, after.ca), after.bundleSubjects)
		}
		if !bytes.Equal(before.ca, after.ca) || !bytes.Equal(before.caKey, after.caKey) {
			t.Fatalf("CA changed from %s to %s, want it kept", subjectOf(t, before.ca), subjectOf(t, after.ca))
		}
		if bytes.Equal(before.serving, after.serving) || bytes.Equal(before.key, after.key) {
			t.Fatal("serving certificate and key not renewed")
		}
	}
	// bundleBeforeSecret: the configuration is patched before the
	// certificate it must trust is stored.
	bundleBeforeSecret := func(t *testing.T, calls []string) {
		t.Helper()
		p := slices.IndexFunc(calls, func(s string) bool { return strings.HasPrefix(s, "patch mutatingwebhookconfiguration") })
		a := slices.Index(calls, "applied Secret dataccel-webhook-tls")
		if p < 0 || a < 0 || p > a {
			t.Fatalf("calls %q: want the caBundle patched before the serving Secret is applied", calls)
		}
	}
	steps := []step{
		{name: "first run", check: func(t *testing.T, before, after state, calls []string) {
			if after.serving == nil || after.key == nil {
				t.Fatal("want the serving Secret stored")
			}
			if _, err := tls.X509KeyPair(after.serving, after.key); err != nil {
				t.Fatalf("the webhook cannot load its pair: %v", err)
			}
			if len(after.bundleSubjects) != 1 {
				t.Fatalf("caBundle holds %v, want one CA", after.bundleSubjects)
			}
			servedWhileSwitching(t, before, after)
		}},
		{name: "renew", check: func(t *testing.T, before, after state, calls []string) {
			servedWhileSwitching(t, before, after)
			unchangedBundle(t, before, after, calls)
			keptCA(t, before, after)
		}},
		{name: "a kubectl failure is not a missing CA", env: []string{fakeKubectlFailEnv + "=get secret"}, wantErr: "Unable to connect",
			check: func(t *testing.T, before, after state, calls []string) {
				if !bytes.Equal(before.ca, after.ca) || !bytes.Equal(before.serving, after.serving) || !bytes.Equal(before.bundle, after.bundle) {
					t.Fatal("a failed read of the CA changed the cluster")
				}
			}},
		{name: "CA expiring before the certificate", env: []string{"DAYS=" + strconv.Itoa(3651)}, wantErr: "run with --rotate-ca",
			check: func(t *testing.T, before, after state, calls []string) {
				if !bytes.Equal(before.serving, after.serving) || !bytes.Equal(before.bundle, after.bundle) {
					t.Fatal("a refused run changed the cluster")
				}
			}},
		{name: "unknown flag", args: []string{"--rotate"}, wantErr: "usage:"},
		{name: "days with a leading zero", env: []string{"DAYS=0365"}, wantErr: "no leading zero"},
		{name: "rotate the CA", args: []string{"--rotate-ca"}, check: func(t *testing.T, before, after state, calls []string) {
			if bytes.Equal(before.ca, after.ca) || bytes.Equal(before.caKey, after.caKey) {
				t.Fatal("CA not rotated")
			}
			if want := []string{subjectOf(t, before.ca), subjectOf(t, after.ca)}; !slices.Equal(after.bundleSubjects, want) {
				t.Fatalf("caBundle holds %v, want the old and the new CA %v", after.bundleSubjects, want)
			}
			if err := trusts(t, after.ca, after.serving); err != nil {
				t.Fatalf("the new certificate is not signed by the new CA: %v", err)
			}
			servedWhileSwitching(t, before, after)
			bundleBeforeSecret(t, calls)
		}},
		{name: "renew after a rotation keeps both CAs", check: func(t *testing.T, before, after state, calls []string) {
			servedWhileSwitching(t, before, after)
			unchangedBundle(t, before, after, calls)
			keptCA(t, before, after)
		}},
		{name: "drop the old CA", args: []string{"--drop-old-cas"}, check: func(t *testing.T, before, after state, calls []string) {
			if !slices.Equal(after.bundleSubjects, []string{subjectOf(t, after.ca)}) {
				t.Fatalf("caBundle holds %v, want the current CA alone", after.bundleSubjects)
			}
			if !bytes.Equal(before.serving, after.serving) || !bytes.Equal(before.ca, after.ca) {
				t.Fatal("--drop-old-cas changed the certificates")
			}
			servedWhileSwitching(t, before, after)
		}},
	}
	for _, st := range steps {
		// Steps build on each other: stop at the first failure.
		ok := t.Run(st.name, func(t *testing.T) {
			before := c.state(t)
			out, calls, err := c.genCert(t, st.env, st.args...)
			switch {
			case st.wantErr == "" && err != nil:
				t.Fatalf("gen-cert.sh: %v\n%s", err, out)
			case st.wantErr != "" && (err == nil || !strings.Contains(out, st.wantErr)):
				t.Fatalf("gen-cert.sh: %v, want an error with %q\n%s", err, st.wantErr, out)
			}
			if strings.Contains(out, "PRIVATE KEY") {
				t.Fatalf("output shows a private key:\n%s", out)
			}
			if st.check != nil {
				st.check(t, before, c.state(t), calls)
			}
		})
		if !ok {
			break
		}
	}
}

// TestGenCertFromOldScript: a cluster set up by the earlier gen-cert.sh has
// a CA in the caBundle whose key is lost; the first run keeps trusting it
// beside the new CA until the certificate it signed is replaced.
func TestGenCertFromOldScript(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"renew", nil, ""},
		{"rotate", []string{"--rotate-ca"}, ""},
		{"drop without a CA", []string{"--drop-old-cas"}, "no CA in Secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			// The old script: a new CA in every run, the key thrown away.
			out, _, err := c.genCert(t, nil)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if err := os.Remove(objectFile(c.dir, "Secret", "dataccel-system", "dataccel-webhook-ca")); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			before := c.state(t)
			out, _, err = c.genCert(t, nil, tt.args...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(out, tt.wantErr) {
					t.Fatalf("%v, want an error with %q\n%s", err, tt.wantErr, out)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			after := c.state(t)
			if want := []string{subjectOf(t, before.bundle), subjectOf(t, after.ca)}; !slices.Equal(after.bundleSubjects, want) || want[0] == want[1] {
				t.Fatalf("caBundle holds %v, want the old CA and the new %v", after.bundleSubjects, want)
			}
			for _, crt := range [][]byte{before.serving, after.serving} {
				if err := trusts(t, after.bundle, crt); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
