package webhook_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/deploy"
	"github.com/dataccel/dataccel/webhook"
	"github.com/dataccel/dataccel/webhook/jsonpatch"
)

var testConfig = webhook.Config{
	Image:         "ghcr.io/dataccel/dataccel:test",
	Endpoint:      "http://minio.storage.svc:9000",
	CacheHostPath: "/mnt/nvme/dataccel",
}

const annotatedPod = `
apiVersion: v1
kind: Pod
metadata:
  generateName: train-
  namespace: ml
  annotations:
    dataccel.io/inject: "true"
    dataccel.io/bucket: datasets
    dataccel.io/prefix: imagenet/train
    dataccel.io/cache-size: 400GiB
    dataccel.io/ram-cache-size: 8GiB
spec:
  restartPolicy: Never
  securityContext: {runAsUser: 1000, runAsNonRoot: true}
  containers:
  - name: trainer
    image: pytorch/pytorch:latest
    command: [python, train.py, --data, /data]
`

// podWith returns annotatedPod with the annotation key set to value
// (value "-" deletes it).
func podWith(t *testing.T, key, value string) string {
	t.Helper()
	return annotate(t, annotatedPod, key, value)
}

// annotate returns podYAML with the annotation key set to value (value "-"
// deletes it).
func annotate(t *testing.T, podYAML, key, value string) string {
	t.Helper()
	var p map[string]any
	if err := yaml.Unmarshal([]byte(podYAML), &p); err != nil {
		t.Fatal(err)
	}
	ann := p["metadata"].(map[string]any)["annotations"].(map[string]any)
	if value == "-" {
		delete(ann, key)
	} else {
		ann[key] = value
	}
	b, err := yaml.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// review runs one pod (YAML) through the handler as an AdmissionReview and
// returns the response.
func review(t *testing.T, h http.Handler, podYAML string, op admissionv1.Operation) *admissionv1.AdmissionResponse {
	t.Helper()
	raw, err := yaml.YAMLToJSON([]byte(podYAML))
	if err != nil {
		t.Fatal(err)
	}
	in := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("uid-123"),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: "ml",
			Operation: op,
			Object:    runtime.RawExtension{Raw: raw},
		},
	}
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, webhook.PathMutate, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" {
		t.Fatalf("response type %s %s", out.APIVersion, out.Kind)
	}
	if out.Response == nil || out.Response.UID != "uid-123" {
		t.Fatalf("response %+v does not carry the request UID", out.Response)
	}
	return out.Response
}

// applyPatch applies the response's patch to the pod and decodes the
// result strictly. It also checks the patch only adds, and never
// overwrites a member the pod already had.
func applyPatch(t *testing.T, podYAML string, resp *admissionv1.AdmissionResponse) *corev1.Pod {
	t.Helper()
	raw, err := yaml.YAMLToJSON([]byte(podYAML))
	if err != nil {
		t.Fatal(err)
	}
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patch type %v, want JSONPatch", resp.PatchType)
	}
	var ops []jsonpatch.Operation
	if err := json.Unmarshal(resp.Patch, &ops); err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if op.Op != "add" {
			t.Fatalf("patch has %s %s: the webhook must only add", op.Op, op.Path)
		}
		if !strings.HasSuffix(op.Path, "/-") {
			_, err := jsonpatch.Apply(doc, []jsonpatch.Operation{{Op: "test", Path: op.Path}})
			if err == nil || !strings.Contains(err.Error(), "does not exist") {
				t.Fatalf("patch overwrites existing %s", op.Path)
			}
		}
	}
	patched, err := jsonpatch.ApplyJSON(raw, resp.Patch)
	if err != nil {
		t.Fatalf("apply patch: %v\npatch: %s", err, resp.Patch)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(patched, &pod); err != nil {
		t.Fatalf("patched pod does not decode strictly: %v", err)
	}
	return &pod
}

func newHandler(t *testing.T, reg prometheus.Registerer) *webhook.Handler {
	t.Helper()
	h, err := webhook.NewHandler(testConfig, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func sidecars(pod *corev1.Pod) []corev1.Container {
	var out []corev1.Container
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if c.Name == webhook.SidecarName {
			out = append(out, c)
		}
	}
	return out
}

func TestInject(t *testing.T) {
	withInit := strings.Replace(annotatedPod, "  containers:\n", `  initContainers:
  - name: fetch-labels
    image: busybox
    command: [sh, -c, "true"]
  volumes:
  - name: scratch
    emptyDir: {}
  containers:
`, 1)
	withInit = strings.Replace(withInit, "    command: [python, train.py, --data, /data]\n",
		"    command: [python, train.py, --data, /data]\n    volumeMounts:\n    - {name: scratch, mountPath: /scratch}\n  - name: logger\n    image: busybox\n", 1)
	tests := []struct {
		name, pod    string
		wantMount    string
		wantCacheDir string
		wantInits    int
	}{
		{"minimal pod", annotatedPod, "/data", "/mnt/nvme/dataccel/ml/datasets/imagenet%2Ftrain", 1},
		{"pod with init containers, volumes and mounts", withInit, "/data", "/mnt/nvme/dataccel/ml/datasets/imagenet%2Ftrain", 2},
		{"custom mount path, no prefix", podWith(t, webhook.AnnotationPrefix, "-"), "/data", "/mnt/nvme/dataccel/ml/datasets/%2F", 1},
		{"mount path annotation", podWith(t, webhook.AnnotationMountPath, "/datasets/imagenet"), "/datasets/imagenet", "/mnt/nvme/dataccel/ml/datasets/imagenet%2Ftrain", 1},
		{"cache size as a share", podWith(t, webhook.AnnotationCacheSize, "80%"), "/data", "/mnt/nvme/dataccel/ml/datasets/imagenet%2Ftrain", 1},
		{"a prefix longer than a file name once escaped", podWith(t, webhook.AnnotationPrefix, strings.Repeat("dir/", 100)), "/data",
			"/mnt/nvme/dataccel/ml/datasets/" + strings.Repeat("dir%2F", 36) + "dir%2" + "~" + longPrefixHash, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHandler(t, nil)
			resp := review(t, h, tt.pod, admissionv1.Create)
			if !resp.Allowed {
				t.Fatalf("denied: %v", resp.Result)
			}
			pod := applyPatch(t, tt.pod, resp)
			sc := sidecars(pod)
			if len(sc) != 1 {
				t.Fatalf("%d sidecars, want exactly 1", len(sc))
			}
			if len(pod.Spec.InitContainers) != tt.wantInits {
				t.Fatalf("%d init containers, want %d", len(pod.Spec.InitContainers), tt.wantInits)
			}
			last := pod.Spec.InitContainers[len(pod.Spec.InitContainers)-1]
			if last.Name != webhook.SidecarName {
				t.Fatalf("sidecar is not the last init container: %s", last.Name)
			}
			s := sc[0]
			if s.RestartPolicy == nil || *s.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				t.Fatal("sidecar is not a native sidecar (restartPolicy Always)")
			}
			if s.SecurityContext == nil || s.SecurityContext.Privileged == nil || !*s.SecurityContext.Privileged {
				t.Fatal("Bidirectional propagation needs a privileged sidecar")
			}
			// The pod says runAsNonRoot: true; the sidecar, which runs as
			// root, must say otherwise or the kubelet refuses to start it.
			if sctx := s.SecurityContext; sctx.RunAsUser == nil || *sctx.RunAsUser != 0 || sctx.RunAsNonRoot == nil || *sctx.RunAsNonRoot {
				t.Fatalf("sidecar security context %+v: want runAsUser 0 and runAsNonRoot false, stated", sctx)
			}
			checkMount(t, s, webhook.DataVolumeName, tt.wantMount, corev1.MountPropagationBidirectional)
			for _, c := range pod.Spec.Containers {
				checkMount(t, c, webhook.DataVolumeName, tt.wantMount, corev1.MountPropagationHostToContainer)
				if c.SecurityContext != nil {
					t.Fatalf("container %s: security context changed", c.Name)
				}
			}
			if got := s.Args[1:3]; got[1] != tt.wantMount {
				t.Fatalf("sidecar mounts at %v, want %s", got, tt.wantMount)
			}
			if !contains(s.Args, "--allow-other") || !contains(s.Args, "--announce-any-user") || !contains(s.Args, "--endpoint=http://minio.storage.svc:9000") ||
				!contains(s.Args, "--outage-grace="+webhook.DefaultOutageGrace) {
				t.Fatalf("args %v", s.Args)
			}
			for _, e := range s.Env {
				if e.Name == "GOMEMLIMIT" {
					continue
				}
				if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != webhook.DefaultSecret {
					t.Fatalf("env %s does not come from the Secret", e.Name)
				}
			}
			for _, a := range s.Args {
				if strings.Contains(strings.ToLower(a), "secret") || strings.Contains(strings.ToLower(a), "access-key") {
					t.Fatalf("credential-looking argument %q", a)
				}
			}
			var cacheVol *corev1.Volume
			for i, v := range pod.Spec.Volumes {
				if v.Name == webhook.CacheVolumeName {
					cacheVol = &pod.Spec.Volumes[i]
				}
			}
			// The node's cache root, which must exist (never made on a
			// node's root disk), and the dataset's directory in it.
			if cacheVol == nil || cacheVol.HostPath == nil || cacheVol.HostPath.Path != "/mnt/nvme/dataccel" ||
				cacheVol.HostPath.Type == nil || *cacheVol.HostPath.Type != corev1.HostPathDirectory {
				t.Fatalf("cache volume %+v, want hostPath /mnt/nvme/dataccel of type Directory", cacheVol)
			}
			if want := "--cache-dir=/cache/" + strings.TrimPrefix(tt.wantCacheDir, "/mnt/nvme/dataccel/"); !contains(s.Args, want) {
				t.Fatalf("sidecar args %v, want %s", s.Args, want)
			}
			ram, err := cache.ParseSize("8GiB")
			if err != nil {
				t.Fatal(err)
			}
			if m := s.Resources.Requests.Memory(); m.Value() < ram {
				t.Fatalf("memory request %s is below the RAM cache (8GiB)", m)
			}
			if !s.Resources.Limits.Memory().Equal(*s.Resources.Requests.Memory()) {
				t.Fatal("memory limit differs from request")
			}
			if pod.Annotations[webhook.AnnotationStatus] != "injected" {
				t.Fatalf("status annotation %q", pod.Annotations[webhook.AnnotationStatus])
			}

			// Idempotent: the patched pod passes unchanged.
			b, err := yaml.Marshal(pod)
			if err != nil {
				t.Fatal(err)
			}
			again := review(t, h, string(b), admissionv1.Create)
			if !again.Allowed || again.Patch != nil {
				t.Fatalf("second pass: allowed=%v patch=%s", again.Allowed, again.Patch)
			}
		})
	}
}

func checkMount(t *testing.T, c corev1.Container, vol, path string, prop corev1.MountPropagationMode) {
	t.Helper()
	n := 0
	for _, m := range c.VolumeMounts {
		if m.Name != vol {
			continue
		}
		n++
		if m.MountPath != path || m.MountPropagation == nil || *m.MountPropagation != prop {
			t.Fatalf("container %s mounts %s at %s propagation %v, want %s %s", c.Name, vol, m.MountPath, m.MountPropagation, path, prop)
		}
	}
	if n != 1 {
		t.Fatalf("container %s mounts %s %d times, want 1", c.Name, vol, n)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestDollarsReachTheSidecar: the kubelet expands $(VAR) in args and turns
// $$ into $; a prefix or a mount path from an annotation must reach the
// sidecar as written, never as another prefix or a variable's value.
func TestDollarsReachTheSidecar(t *testing.T) {
	const prefix, mountPath = "runs/a$$b/$(AWS_SECRET_ACCESS_KEY)/", "/data/$(GOMEMLIMIT)"
	pod := annotate(t, podWith(t, webhook.AnnotationPrefix, prefix), webhook.AnnotationMountPath, mountPath)
	resp := review(t, newHandler(t, nil), pod, admissionv1.Create)
	if !resp.Allowed {
		t.Fatalf("denied: %v", resp.Result)
	}
	sc := sidecars(applyPatch(t, pod, resp))
	if len(sc) != 1 {
		t.Fatalf("%d sidecars, want 1", len(sc))
	}
	args, err := deploy.ExpandArgs(sc[0], "default", nil)
	if err != nil {
		t.Fatalf("the kubelet's expansion: %v", err)
	}
	if want := (&url.URL{Scheme: "s3", Host: "datasets", Path: "/" + prefix}).String(); args[1] != want || args[2] != mountPath {
		t.Errorf("the sidecar gets %q %q, want %q %q", args[1], args[2], want, mountPath)
	}
}

// TestCachePerNamespace: a mount serves what its cache holds without asking
// the store, so pods of two namespaces (two tenants, two sets of keys) that
// read the same bucket and prefix get two caches; a pod that names no
// namespace gets the request's.
func TestCachePerNamespace(t *testing.T) {
	cacheDir := func(podYAML string) string {
		t.Helper()
		var pod corev1.Pod
		if err := yaml.Unmarshal([]byte(podYAML), &pod); err != nil {
			t.Fatal(err)
		}
		ops, result, err := testConfig.WithDefaults().Mutate(&pod)
		if err != nil || result != webhook.Injected {
			t.Fatalf("mutate: %v %v", result, err)
		}
		b, _ := json.Marshal(ops)
		m := regexp.MustCompile(`--cache-dir=([^"]*)`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("no --cache-dir in %s", b)
		}
		return string(m[1])
	}
	ml := cacheDir(annotatedPod)
	other := cacheDir(strings.Replace(annotatedPod, "namespace: ml", "namespace: other", 1))
	if ml != "/cache/ml/datasets/imagenet%2Ftrain" || other != "/cache/other/datasets/imagenet%2Ftrain" {
		t.Errorf("cache dirs %s and %s: want one per namespace", ml, other)
	}
	// Through the handler, a pod without a namespace is in the request's (ml).
	noNS := strings.Replace(annotatedPod, "  namespace: ml\n", "", 1)
	if noNS == annotatedPod {
		t.Fatal("the test pod names no namespace to remove")
	}
	resp := review(t, newHandler(t, nil), noNS, admissionv1.Create)
	if !resp.Allowed || !strings.Contains(string(resp.Patch), "--cache-dir=/cache/ml/datasets/") {
		t.Errorf("a pod without a namespace: patch %s, want its cache under the request's namespace", resp.Patch)
	}
}

// TestMemoryAnnotation: a pod may give its sidecar more memory than the
// RAM cache and the headroom (a dataset of many files needs it for its
// listings); GOMEMLIMIT follows.
func TestMemoryAnnotation(t *testing.T) {
	pod := podWith(t, webhook.AnnotationMemory, "12Gi")
	resp := review(t, newHandler(t, nil), pod, admissionv1.Create)
	if !resp.Allowed {
		t.Fatalf("denied: %v", resp.Result)
	}
	sc := sidecars(applyPatch(t, pod, resp))[0]
	want := resource.MustParse("12Gi")
	if r, l := sc.Resources.Requests.Memory(), sc.Resources.Limits.Memory(); !r.Equal(want) || !l.Equal(want) {
		t.Errorf("memory request %s, limit %s; want 12Gi both", r, l)
	}
	for _, e := range sc.Env {
		if e.Name == "GOMEMLIMIT" && e.Value != strconv.FormatInt(want.Value()/10*9, 10) {
			t.Errorf("GOMEMLIMIT %s, want 90%% of 12Gi", e.Value)
		}
	}
}

func TestUnchanged(t *testing.T) {
	injectedByHand := strings.Replace(annotatedPod, "  containers:\n", `  initContainers:
  - name: dataccel
    image: ghcr.io/dataccel/dataccel:old
    restartPolicy: Always
  containers:
`, 1)
	tests := []struct {
		name, pod string
		op        admissionv1.Operation
	}{
		{"not annotated", podWith(t, webhook.AnnotationInject, "-"), admissionv1.Create},
		{"inject false", podWith(t, webhook.AnnotationInject, "false"), admissionv1.Create},
		{"already injected", injectedByHand, admissionv1.Create},
		{"update is not a create", annotatedPod, admissionv1.Update},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := review(t, newHandler(t, nil), tt.pod, tt.op)
			if !resp.Allowed || resp.Patch != nil || resp.PatchType != nil {
				t.Fatalf("allowed=%v patch=%s, want allowed and unchanged", resp.Allowed, resp.Patch)
			}
		})
	}
}

func TestRejected(t *testing.T) {
	conflictMount := strings.Replace(annotatedPod, "    command: [python, train.py, --data, /data]\n",
		"    command: [python, train.py, --data, /data]\n    volumeMounts:\n    - {name: other, mountPath: /data}\n  volumes:\n  - {name: other, emptyDir: {}}\n", 1)
	conflictName := strings.Replace(annotatedPod, "  - name: trainer\n", "  - name: dataccel\n", 1)
	conflictVol := strings.Replace(annotatedPod, "  containers:\n", "  volumes:\n  - {name: dataccel-cache, emptyDir: {}}\n  containers:\n", 1)
	trainerPort9100 := strings.Replace(annotatedPod, "    command: [python, train.py, --data, /data]\n",
		"    command: [python, train.py, --data, /data]\n    ports:\n    - {name: metrics, containerPort: 9100}\n", 1)
	hostNetwork := strings.Replace(annotatedPod, "spec:\n", "spec:\n  hostNetwork: true\n", 1)
	hostNetworkPort9100 := strings.Replace(trainerPort9100, "spec:\n", "spec:\n  hostNetwork: true\n", 1)
	nativeSidecarPort9100 := strings.Replace(annotatedPod, "  containers:\n", `  initContainers:
  - name: proxy
    image: envoyproxy/envoy
    restartPolicy: Always
    ports:
    - {containerPort: 9100, protocol: TCP}
  containers:
`, 1)
	plainInitNamedDataccel := strings.Replace(annotatedPod, "  containers:\n", `  initContainers:
  - name: dataccel
    image: busybox
    command: [sh, -c, "true"]
  containers:
`, 1)
	mountInside := strings.Replace(annotatedPod, "    command: [python, train.py, --data, /data]\n",
		"    command: [python, train.py, --data, /data]\n    volumeMounts:\n    - {name: ckpt, mountPath: /data/checkpoints}\n  volumes:\n  - {name: ckpt, emptyDir: {}}\n", 1)
	tests := []struct {
		name, pod, wantMsg string
	}{
		{"inject yes", podWith(t, webhook.AnnotationInject, "yes"), `dataccel.io/inject="yes": want "true" or "false"`},
		{"no bucket", podWith(t, webhook.AnnotationBucket, "-"), "dataccel.io/bucket"},
		{"bad bucket", podWith(t, webhook.AnnotationBucket, "My_Bucket"), `dataccel.io/bucket="My_Bucket"`},
		{"prefix with ..", podWith(t, webhook.AnnotationPrefix, "a/../b"), "dataccel.io/prefix"},
		{"prefix leading slash", podWith(t, webhook.AnnotationPrefix, "/imagenet"), "leading"},
		{"relative mount path", podWith(t, webhook.AnnotationMountPath, "data"), "dataccel.io/mount-path"},
		{"mount path /", podWith(t, webhook.AnnotationMountPath, "/"), "must not be /"},
		{"mount path under /proc", podWith(t, webhook.AnnotationMountPath, "/proc/x"), "/proc"},
		{"cache size words", podWith(t, webhook.AnnotationCacheSize, "lots"), `dataccel.io/cache-size="lots"`},
		{"cache size zero", podWith(t, webhook.AnnotationCacheSize, "0"), "positive size"},
		{"cache share over 100%", podWith(t, webhook.AnnotationCacheSize, "120%"), "dataccel.io/cache-size"},
		{"ram size as share", podWith(t, webhook.AnnotationRAMCacheSize, "10%"), "dataccel.io/ram-cache-size"},
		{"ram size unit", podWith(t, webhook.AnnotationRAMCacheSize, "8 parsecs"), "dataccel.io/ram-cache-size"},
		{"memory below the RAM cache and headroom", podWith(t, webhook.AnnotationMemory, "9Gi"), `dataccel.io/memory="9Gi": want at least the RAM cache and 2Gi (10Gi here`},
		{"memory not a quantity", podWith(t, webhook.AnnotationMemory, "lots"), `dataccel.io/memory="lots": want a memory quantity`},
		{"endpoint scheme", podWith(t, webhook.AnnotationEndpoint, "ftp://x"), "dataccel.io/endpoint"},
		{"endpoint with credentials", podWith(t, webhook.AnnotationEndpoint, "http://AKIA:s3cr3t@minio:9000"), "must not carry credentials"},
		{"endpoint with credentials that do not parse", podWith(t, webhook.AnnotationEndpoint, "https://AKIA:s3cr3t@x@minio:9000/%zz"), "must not carry credentials"},
		{"endpoint with credentials, wrong scheme", podWith(t, webhook.AnnotationEndpoint, "s3://AKIA:s3cr3t@minio"), "must not carry credentials"},
		{"mount path on the sidecar's cache", podWith(t, webhook.AnnotationMountPath, "/cache"), "must not be under /cache"},
		{"mount path hiding the sidecar's binary", podWith(t, webhook.AnnotationMountPath, "/usr/local/bin"), "must not be /usr/local/bin"},
		{"a mount inside the mount path", mountInside, `mounts volume "ckpt" at /data/checkpoints, inside the dataset's mount path /data`},
		{"secret name", podWith(t, webhook.AnnotationSecret, "Not_A_Name"), "dataccel.io/secret"},
		{"credentials source", podWith(t, webhook.AnnotationCredentials, "irsa"), `dataccel.io/credentials="irsa": want "secret"`},
		{"sweep", podWith(t, webhook.AnnotationSweep, "off"), `dataccel.io/sweep="off": want "false"`},
		{"region with a space", podWith(t, webhook.AnnotationRegion, "eu central-1"), `dataccel.io/region="eu central-1"`},
		{"region with a slash", podWith(t, webhook.AnnotationRegion, "eu-central-1/x"), "dataccel.io/region"},
		{"region that is a flag", podWith(t, webhook.AnnotationRegion, "--endpoint=http://evil:9000"), "dataccel.io/region"},
		{"region starting with -", podWith(t, webhook.AnnotationRegion, "-eu-central-1"), "dataccel.io/region"},
		{"region with =", podWith(t, webhook.AnnotationRegion, "eu=central"), "dataccel.io/region"},
		{"region with a newline", podWith(t, webhook.AnnotationRegion, "eu-central-1\n--allow-root"), "dataccel.io/region"},
		{"region too long", podWith(t, webhook.AnnotationRegion, strings.Repeat("a", 65)), "dataccel.io/region"},
		{"http port zero", podWith(t, webhook.AnnotationHTTPPort, "0"), `dataccel.io/http-port="0": want a TCP port number, 1-65535`},
		{"http port too large", podWith(t, webhook.AnnotationHTTPPort, "65536"), "dataccel.io/http-port"},
		{"http port negative", podWith(t, webhook.AnnotationHTTPPort, "-1"), "dataccel.io/http-port"},
		{"http port with a sign", podWith(t, webhook.AnnotationHTTPPort, "+9400"), "dataccel.io/http-port"},
		{"http port a name", podWith(t, webhook.AnnotationHTTPPort, "metrics"), "dataccel.io/http-port"},
		{"hostNetwork without an http port", hostNetwork, `dataccel.io/http-port="": required on a hostNetwork pod`},
		{"default http port declared by the trainer", trainerPort9100, `container "trainer" declares port 9100/TCP`},
		{"annotated http port declared by the trainer", annotate(t, trainerPort9100, webhook.AnnotationHTTPPort, "9100"), "choose another port with dataccel.io/http-port"},
		{"hostNetwork http port declared by the trainer", annotate(t, hostNetworkPort9100, webhook.AnnotationHTTPPort, "9100"), `container "trainer" declares port 9100/TCP`},
		{"http port declared by a native sidecar", nativeSidecarPort9100, `container "proxy" declares port 9100/TCP`},
		{"mount path taken", conflictMount, `already mounts volume "other" at /data`},
		{"container named dataccel", conflictName, "reserved"},
		{"plain init container named dataccel", plainInitNamedDataccel, `init container name "dataccel" is reserved`},
		{"volume named dataccel-cache", conflictVol, "reserved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := review(t, newHandler(t, nil), tt.pod, admissionv1.Create)
			if resp.Allowed || resp.Patch != nil {
				t.Fatalf("allowed=%v patch=%s, want rejected", resp.Allowed, resp.Patch)
			}
			if resp.Result == nil || !strings.Contains(resp.Result.Message, tt.wantMsg) {
				t.Fatalf("message %v, want it to contain %q", resp.Result, tt.wantMsg)
			}
			if strings.Contains(resp.Result.Message, "s3cr3t") {
				t.Fatalf("message echoes a credential: %s", resp.Result.Message)
			}
		})
	}
}

func TestBadRequests(t *testing.T) {
	tests := []struct {
		name, method, ctype, body string
		want                      int
	}{
		{"GET", http.MethodGet, "application/json", "", http.StatusMethodNotAllowed},
		{"wrong content type", http.MethodPost, "text/plain", "{}", http.StatusUnsupportedMediaType},
		{"not JSON", http.MethodPost, "application/json", "{", http.StatusBadRequest},
		{"no request", http.MethodPost, "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, http.StatusBadRequest},
		{"v1beta1", http.MethodPost, "application/json", `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}`, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, webhook.PathMutate, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", tt.ctype)
			rec := httptest.NewRecorder()
			newHandler(t, nil).ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("status %d, want %d (%s)", rec.Code, tt.want, rec.Body)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHandler(t, reg)
	review(t, h, annotatedPod, admissionv1.Create)
	review(t, h, podWith(t, webhook.AnnotationInject, "-"), admissionv1.Create)
	review(t, h, podWith(t, webhook.AnnotationBucket, "-"), admissionv1.Create)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "dataccel_webhook_admissions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					got[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	want := map[string]float64{"injected": 1, "skipped": 1, "rejected": 1}
	if len(got) != len(want) {
		t.Fatalf("counters %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("counters %v, want %v", got, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*webhook.Config)
		ok   bool
	}{
		{"defaults", func(*webhook.Config) {}, true},
		{"no image", func(c *webhook.Config) { c.Image = "" }, false},
		{"relative cache path", func(c *webhook.Config) { c.CacheHostPath = "nvme" }, false},
		{"bad default cache size", func(c *webhook.Config) { c.CacheSize = "big" }, false},
		{"bad default endpoint", func(c *webhook.Config) { c.Endpoint = "minio:9000" }, false},
		{"bad pull policy", func(c *webhook.Config) { c.ImagePullPolicy = "Sometimes" }, false},
		{"metadata ttl without a unit", func(c *webhook.Config) { c.MetadataTTL = "90" }, false},
		{"zero metadata ttl", func(c *webhook.Config) { c.MetadataTTL = "0s" }, false},
		{"metadata ttl", func(c *webhook.Config) { c.MetadataTTL = "90s" }, true},
		{"outage grace without a unit", func(c *webhook.Config) { c.OutageGrace = "15" }, false},
		{"negative outage grace", func(c *webhook.Config) { c.OutageGrace = "-1m" }, false},
		{"no outage grace", func(c *webhook.Config) { c.OutageGrace = "0s" }, true},
		{"outage grace", func(c *webhook.Config) { c.OutageGrace = "2h" }, true},
		{"max inflight over the sidecar's bound", func(c *webhook.Config) { c.MaxInflight = webhook.MaxInflightLimit + 1 }, false},
		{"max inflight at the sidecar's bound", func(c *webhook.Config) { c.MaxInflight = webhook.MaxInflightLimit }, true},
		{"region", func(c *webhook.Config) { c.Region = "eu-central-1" }, true},
		{"region that is a flag", func(c *webhook.Config) { c.Region = "--endpoint=x" }, false},
		{"region with a space", func(c *webhook.Config) { c.Region = "us east" }, false},
		{"another store's region", func(c *webhook.Config) { c.Region = "US.East_1" }, true},
		{"credentials from the pod", func(c *webhook.Config) { c.Credentials = "pod" }, true},
		{"credentials from elsewhere", func(c *webhook.Config) { c.Credentials = "vault" }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig
			tt.mod(&c)
			_, err := webhook.NewHandler(c, nil, nil)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			// A bad default is the flag's, not an annotation nobody set.
			if err != nil && strings.Contains(err.Error(), "dataccel.io/") && c.Region != testConfig.Region {
				t.Fatalf("err = %v names an annotation for the webhook's own --region", err)
			}
		})
	}
}

// longPrefixHash is the hash a prefix of 100 "dir/" names its cache
// directory by (the first 16 bytes of its SHA-256, in hex).
var longPrefixHash = func() string {
	sum := sha256.Sum256([]byte(strings.Repeat("dir/", 100)))
	return hex.EncodeToString(sum[:16])
}()

// injected runs podYAML through a handler for cfg, wants it injected, and
// returns the patched pod and its sidecar.
func injected(t *testing.T, cfg webhook.Config, podYAML string) (*corev1.Pod, corev1.Container) {
	t.Helper()
	h, err := webhook.NewHandler(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp := review(t, h, podYAML, admissionv1.Create)
	if !resp.Allowed {
		t.Fatalf("denied: %v", resp.Result)
	}
	pod := applyPatch(t, podYAML, resp)
	sc := sidecars(pod)
	if len(sc) != 1 {
		t.Fatalf("%d sidecars, want exactly 1", len(sc))
	}
	return pod, sc[0]
}

// flagValues returns every value of --name=V in args.
func flagValues(args []string, name string) []string {
	var out []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

// TestHTTPPort: the sidecar serves, declares and is probed on the port
// the pod chose (or the webhook's default), and a hostNetwork pod claims
// it on the node.
func TestHTTPPort(t *testing.T) {
	hostNet := func(pod string) string { return strings.Replace(pod, "spec:\n", "spec:\n  hostNetwork: true\n", 1) }
	// The trainer's UDP 9100 and a finished init container's TCP 9100 do
	// not collide with the sidecar's TCP listener.
	otherPorts := strings.Replace(annotatedPod, "    command: [python, train.py, --data, /data]\n",
		"    command: [python, train.py, --data, /data]\n    ports:\n    - {containerPort: 9100, protocol: UDP}\n", 1)
	otherPorts = strings.Replace(otherPorts, "  containers:\n", `  initContainers:
  - name: warmup
    image: busybox
    ports:
    - {containerPort: 9100}
  containers:
`, 1)
	tests := []struct {
		name         string
		cfgPort      int32
		pod          string
		wantPort     int32
		wantHostPort int32
	}{
		{"default", 0, annotatedPod, webhook.DefaultHTTPPort, 0},
		{"webhook flag", 9200, annotatedPod, 9200, 0},
		{"annotation", 9200, podWith(t, webhook.AnnotationHTTPPort, "9400"), 9400, 0},
		{"annotation, highest port", 0, podWith(t, webhook.AnnotationHTTPPort, "65535"), 65535, 0},
		{"hostNetwork with the annotation", 0, hostNet(podWith(t, webhook.AnnotationHTTPPort, "19100")), 19100, 19100},
		{"hostNetwork with the operator's port", 19200, hostNet(annotatedPod), 19200, 19200},
		{"same number, other protocol or an exited init container", 0, otherPorts, webhook.DefaultHTTPPort, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig
			cfg.HTTPPort = tt.cfgPort
			_, s := injected(t, cfg, tt.pod)
			if got := flagValues(s.Args, "http"); len(got) != 1 || got[0] != fmt.Sprintf(":%d", tt.wantPort) {
				t.Fatalf("--http %v, want [:%d]", got, tt.wantPort)
			}
			if len(s.Ports) != 1 || s.Ports[0].ContainerPort != tt.wantPort || s.Ports[0].HostPort != tt.wantHostPort ||
				s.Ports[0].Protocol != corev1.ProtocolTCP {
				t.Fatalf("ports %+v, want TCP %d (host port %d)", s.Ports, tt.wantPort, tt.wantHostPort)
			}
			for name, p := range map[string]*corev1.Probe{"startup": s.StartupProbe, "readiness": s.ReadinessProbe, "liveness": s.LivenessProbe} {
				if p == nil || p.HTTPGet == nil {
					t.Fatalf("no %s httpGet probe", name)
				}
				port := p.HTTPGet.Port
				if port.String() != s.Ports[0].Name && port.IntValue() != int(tt.wantPort) {
					t.Fatalf("%s probe on port %s, want the sidecar's %d", name, port.String(), tt.wantPort)
				}
			}
		})
	}
}

// TestPodIdentity: with credentials from the pod, the sidecar reads no
// Secret and takes the pod's EKS identity (IRSA's or Pod Identity's
// environment and the mount of its token, read-only: the deepest mount on
// the token's path, not a wider hostPath, and a subPath file mount too)
// from the first container that has one; without one it has none (the
// node's instance profile). The Secret's keys stay the default.
func TestPodIdentity(t *testing.T) {
	irsa := strings.Replace(annotatedPod, "    command: [python, train.py, --data, /data]\n", `    command: [python, train.py, --data, /data]
    env:
    - {name: HOME, value: /home/me}
    - {name: AWS_ROLE_ARN, value: "arn:aws:iam::123456789012:role/reader"}
    - {name: AWS_WEB_IDENTITY_TOKEN_FILE, value: /var/run/secrets/eks.amazonaws.com/serviceaccount/token}
    - {name: AWS_STS_REGIONAL_ENDPOINTS, value: regional}
    - {name: AWS_REGION, value: eu-west-1}
    volumeMounts:
    - {name: host-var, mountPath: /var}
    - {name: aws-iam-token, mountPath: /var/run/secrets/eks.amazonaws.com/serviceaccount}
    - {name: scratch, mountPath: /scratch}
  volumes:
  - {name: scratch, emptyDir: {}}
  - {name: host-var, hostPath: {path: /var}}
  - name: aws-iam-token
    projected: {sources: [{serviceAccountToken: {audience: sts.amazonaws.com, expirationSeconds: 86400, path: token}}]}
`, 1)
	podIdentity := strings.Replace(annotatedPod, "    command: [python, train.py, --data, /data]\n", `    command: [python, train.py, --data, /data]
    env:
    - {name: AWS_CONTAINER_CREDENTIALS_FULL_URI, value: "http://169.254.170.23/v1/credentials"}
    - {name: AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE, value: /var/run/secrets/pods.eks.amazonaws.com/serviceaccount/eks-pod-identity-token}
    volumeMounts:
    - {name: eks-pod-identity-token, mountPath: /var/run/secrets/pods.eks.amazonaws.com/serviceaccount/eks-pod-identity-token, subPath: eks-pod-identity-token}
  volumes:
  - name: eks-pod-identity-token
    projected: {sources: [{serviceAccountToken: {audience: pods.eks.amazonaws.com, expirationSeconds: 86400, path: eks-pod-identity-token}}]}
`, 1)
	irsaEnv := []string{"AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_REGION"} // not AWS_STS_REGIONAL_ENDPOINTS: unread
	secretEnv := []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
	tests := []struct {
		name, cfgCreds, pod string   // cfgCreds: the webhook's --credentials
		wantEnv             []string // names, in order, GOMEMLIMIT aside
		wantMounts          []string // beyond the data and cache volumes
	}{
		{"the Secret by default", "", irsa, secretEnv, nil},
		{"IRSA", "", annotate(t, irsa, webhook.AnnotationCredentials, "pod"), irsaEnv, []string{"aws-iam-token"}},
		{"Pod Identity", "", annotate(t, podIdentity, webhook.AnnotationCredentials, "pod"), []string{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"}, []string{"eks-pod-identity-token"}},
		{"no identity: the node's", "", podWith(t, webhook.AnnotationCredentials, "pod"), nil, nil},
		{"the webhook's default", "pod", irsa, irsaEnv, []string{"aws-iam-token"}},
		{"a pod choosing the Secret over the default", "pod", annotate(t, irsa, webhook.AnnotationCredentials, "secret"), secretEnv, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig
			cfg.Credentials = tt.cfgCreds
			_, s := injected(t, cfg, tt.pod)
			var env, mounts []string
			for _, e := range s.Env {
				if e.Name == "GOMEMLIMIT" {
					continue
				}
				env = append(env, e.Name)
				if tt.wantMounts != nil && e.ValueFrom != nil {
					t.Fatalf("env %s comes from %v with pod credentials", e.Name, e.ValueFrom)
				}
			}
			for _, m := range s.VolumeMounts {
				if m.Name != webhook.DataVolumeName && m.Name != webhook.CacheVolumeName {
					mounts = append(mounts, m.Name)
					if !m.ReadOnly || m.MountPropagation != nil {
						t.Fatalf("token mount %+v: want read-only, not propagated", m)
					}
				}
			}
			if !slices.Equal(env, tt.wantEnv) || !slices.Equal(mounts, tt.wantMounts) {
				t.Fatalf("sidecar env %v and mounts %v; want %v and %v", env, mounts, tt.wantEnv, tt.wantMounts)
			}
		})
	}
}

// TestSweepAnnotation: "false" passes --sweep=false to the sidecar; "true"
// or no annotation leaves the sidecar's default.
func TestSweepAnnotation(t *testing.T) {
	for _, tt := range []struct {
		name string
		pod  string
		want []string
	}{
		{"none", annotatedPod, nil},
		{"true", podWith(t, webhook.AnnotationSweep, "true"), nil},
		{"false", podWith(t, webhook.AnnotationSweep, "false"), []string{"false"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, s := injected(t, testConfig, tt.pod)
			if got := flagValues(s.Args, "sweep"); !slices.Equal(got, tt.want) {
				t.Fatalf("--sweep %v, want %v (args %v)", got, tt.want, s.Args)
			}
		})
	}
}

// TestRegion: the region a pod annotates, else the webhook's, reaches the
// sidecar as --region.
func TestRegion(t *testing.T) {
	tests := []struct {
		name, cfgRegion, pod string
		want                 []string
	}{
		{"none", "", annotatedPod, nil},
		{"webhook default", "us-west-2", annotatedPod, []string{"us-west-2"}},
		{"annotation", "", podWith(t, webhook.AnnotationRegion, "eu-central-1"), []string{"eu-central-1"}},
		{"annotation over the default", "us-west-2", podWith(t, webhook.AnnotationRegion, "ap-southeast-2"), []string{"ap-southeast-2"}},
		{"another store's region", "", podWith(t, webhook.AnnotationRegion, "auto"), []string{"auto"}},
		{"empty annotation: the binary's default", "us-west-2", podWith(t, webhook.AnnotationRegion, ""), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig
			cfg.Region = tt.cfgRegion
			_, s := injected(t, cfg, tt.pod)
			if got := flagValues(s.Args, "region"); !slices.Equal(got, tt.want) {
				t.Fatalf("--region %v, want %v (args %v)", got, tt.want, s.Args)
			}
		})
	}
}
