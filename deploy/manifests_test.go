package deploy_test

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/dataccel/dataccel/cache"
	"github.com/dataccel/dataccel/deploy"
	"github.com/dataccel/dataccel/serve"
	"github.com/dataccel/dataccel/webhook"
)

// renderAll renders every kustomization under deploy/.
func renderAll(t *testing.T) map[string][]deploy.Object {
	t.Helper()
	dirs, err := deploy.Kustomizations(deploy.Files())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"base", "overlays/bench-imagenet", "webhook"}
	if !slices.Equal(dirs, want) {
		t.Fatalf("kustomizations %v, want %v (update the tests when adding one)", dirs, want)
	}
	out := map[string][]deploy.Object{}
	for _, d := range dirs {
		objs, err := deploy.Render(deploy.Files(), d)
		if err != nil {
			t.Fatalf("render %s: %v", d, err)
		}
		out[d] = objs
	}
	return out
}

// TestManifestsDecodeStrictly: every YAML file under deploy/ is a
// kustomization, a patch used by one, or manifests that decode strictly.
func TestManifestsDecodeStrictly(t *testing.T) {
	files, err := deploy.ManifestFiles(deploy.Files())
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, d := range []string{"base", "overlays/bench-imagenet", "webhook"} {
		k, err := fs.ReadFile(deploy.Files(), path.Join(d, deploy.KustomizationFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(k), "\n") {
			if f, ok := strings.CutPrefix(strings.TrimSpace(line), "- path: "); ok {
				used[path.Join(d, f)] = true
			}
		}
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			switch {
			case path.Base(f) == deploy.KustomizationFile:
				if _, err := deploy.Render(deploy.Files(), path.Dir(f)); err != nil {
					t.Fatal(err)
				}
			case used[f]:
				// Applied (and so parsed strictly) by its kustomization.
			default:
				objs, err := deploy.DecodeFile(deploy.Files(), f)
				if err != nil {
					t.Fatal(err)
				}
				if len(objs) == 0 {
					t.Fatal("no object")
				}
			}
		})
	}
	// Rendered, too (patched objects decode strictly).
	renderAll(t)
}

// TestStrictDecoderRejects: the checks above can fail.
func TestStrictDecoderRejects(t *testing.T) {
	const k = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [obj.yaml]\n"
	tests := []struct {
		name string
		obj  string
		kust string
	}{
		{"unknown field", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndatta: {}\n", k},
		{"case-mismatched field", "apiVersion: v1\nkind: ConfigMap\nmetadata: {Name: x}\n", k},
		{"duplicate key", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {a: c}\n", k},
		{"unknown kind", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: x}\n", k},
		{"bad quantity", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers:\n  - name: c\n    resources: {limits: {memory: lots}}\n", k},
		{"unsupported kustomize field", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", k + "namePrefix: a-\n"},
		{"patch matching nothing", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", k + "patches:\n- path: p.yaml\n  target: {version: v1, kind: ConfigMap, name: y}\n"},
		{"duplicate object", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", k},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := fstest.MapFS{
				"k/" + deploy.KustomizationFile: {Data: []byte(tt.kust)},
				"k/obj.yaml":                    {Data: []byte(tt.obj)},
				"k/p.yaml":                      {Data: []byte("- {op: add, path: /data, value: {}}\n")},
			}
			if _, err := deploy.Render(fsys, "k"); err == nil {
				t.Fatal("rendered without error")
			}
		})
	}
}

func TestImagesTransformer(t *testing.T) {
	fsys := fstest.MapFS{
		"k/" + deploy.KustomizationFile:    {Data: []byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../base]\nimages:\n- {name: ghcr.io/dataccel/dataccel, newName: registry.local/dataccel, newTag: v9}\n")},
		"base/" + deploy.KustomizationFile: {Data: []byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [pod.yaml]\n")},
		"base/pod.yaml":                    {Data: []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  initContainers: [{name: a, image: 'ghcr.io/dataccel/dataccel:0.1.0'}]\n  containers: [{name: b, image: busybox}]\n")},
	}
	objs, err := deploy.Render(fsys, "k")
	if err != nil {
		t.Fatal(err)
	}
	spec := deploy.PodSpec(objs[0].Typed)
	if got := spec.InitContainers[0].Image; got != "registry.local/dataccel:v9" {
		t.Fatalf("image %q", got)
	}
	if got := spec.Containers[0].Image; got != "busybox" {
		t.Fatalf("unrelated image changed to %q", got)
	}
}

// flagValue returns the value of --name=V or --name V in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func isDataccel(c corev1.Container) bool {
	return strings.Contains(c.Image, "dataccel/dataccel")
}

func portOf(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, ok := strings.Cut(addr, ":")
	n, err := strconv.Atoi(p)
	if !ok || err != nil {
		t.Fatalf("address %q has no port", addr)
	}
	return int32(n)
}

// TestPodChecks: for every pod the manifests make, the sidecar and the
// trainer are wired as the design says.
// Every kustomization makes at least one pod (a check of none would pass).
func TestPodChecks(t *testing.T) {
	for dir, objs := range renderAll(t) {
		pods := 0
		for _, o := range objs {
			spec := deploy.PodSpec(o.Typed)
			if spec == nil {
				continue
			}
			pods++
			t.Run(dir+"/"+o.Kind()+"/"+o.Name(), func(t *testing.T) {
				checkPod(t, o, spec, objs)
			})
		}
		if pods == 0 {
			t.Errorf("%s makes no pod to check", dir)
		}
	}
}

func checkPod(t *testing.T, o deploy.Object, spec *corev1.PodSpec, objs []deploy.Object) {
	ns := o.Typed.(interface{ GetNamespace() string }).GetNamespace()
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	all := append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
	var mounts []corev1.Container
	for _, c := range all {
		if len(c.Args) > 0 && c.Args[0] == "mount" && isDataccel(c) {
			mounts = append(mounts, c)
		}
		if c.Resources.Requests == nil || c.Resources.Limits == nil ||
			c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
			t.Errorf("container %s: cpu/memory requests and memory limit must be set", c.Name)
		}
		for _, e := range c.Env {
			if strings.HasPrefix(e.Name, "AWS_") && strings.Contains(e.Name, "KEY") &&
				(e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
				t.Errorf("container %s: %s must come from a Secret", c.Name, e.Name)
			}
		}
		for _, a := range c.Args {
			if strings.Contains(a, "AWS_") || strings.Contains(strings.ToLower(a), "secret-key") || strings.Contains(strings.ToLower(a), "access-key") {
				t.Errorf("container %s: argument %q looks like a credential", c.Name, a)
			}
		}
	}
	if len(mounts) == 0 {
		if o.Kind() == "Deployment" {
			checkWebhookDeployment(t, o.Typed.(*appsv1.Deployment), objs)
		}
		for _, c := range all {
			checkUnprivileged(t, c)
		}
		return
	}
	if len(mounts) != 1 {
		t.Fatalf("%d dataccel mount containers, want 1", len(mounts))
	}
	sc := mounts[0]
	if !slices.ContainsFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == sc.Name }) ||
		sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Fatalf("sidecar %s must be an init container with restartPolicy Always (native sidecar)", sc.Name)
	}
	if sc.SecurityContext == nil || sc.SecurityContext.Privileged == nil || !*sc.SecurityContext.Privileged {
		t.Errorf("sidecar: Bidirectional propagation needs privileged: true")
	}
	args, err := deploy.ExpandArgs(sc, ns, objs)
	if err != nil {
		t.Fatal(err)
	}
	if len(args) < 3 || !strings.HasPrefix(args[1], "s3://") {
		t.Fatalf("sidecar args %v: want mount s3://... MOUNTPOINT", args)
	}
	mountpoint := args[2]

	// The dataset volume: an emptyDir, Bidirectional in the sidecar,
	// HostToContainer (and read-only) everywhere else.
	var dataVol string
	for _, m := range sc.VolumeMounts {
		if m.MountPath == mountpoint {
			dataVol = m.Name
			if m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationBidirectional {
				t.Errorf("sidecar mounts %s with propagation %s, want Bidirectional", m.Name, prop(m))
			}
		}
	}
	if v, ok := volumes[dataVol]; !ok || v.EmptyDir == nil {
		t.Fatalf("mountpoint %s is not an emptyDir volume of the sidecar (%q)", mountpoint, dataVol)
	}
	users := 0
	for _, c := range all {
		if c.Name == sc.Name {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.Name != dataVol {
				continue
			}
			users++
			if m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer || !m.ReadOnly {
				t.Errorf("container %s mounts %s with propagation %s readOnly %v, want HostToContainer, read-only", c.Name, dataVol, prop(m), m.ReadOnly)
			}
		}
		checkUnprivileged(t, c)
	}
	if users == 0 {
		t.Error("no container reads the dataset volume")
	}

	// The cache: node-local, at --cache-dir.
	cacheDir, ok := flagValue(args, "cache-dir")
	if !ok {
		t.Fatal("sidecar has no --cache-dir")
	}
	var cacheVol string
	for _, m := range sc.VolumeMounts {
		if m.MountPath == cacheDir || strings.HasPrefix(cacheDir, strings.TrimSuffix(m.MountPath, "/")+"/") {
			cacheVol = m.Name
		}
	}
	switch v, ok := volumes[cacheVol]; {
	case !ok || (v.HostPath == nil && v.PersistentVolumeClaim == nil):
		t.Errorf("--cache-dir %s is not on a hostPath or local volume", cacheDir)
	case v.HostPath != nil && (v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectory):
		// A directory the kubelet makes lands on the root disk when the
		// node's NVMe is not mounted, and the cache fills it.
		t.Errorf("cache hostPath %+v: want type Directory, one the node prepared", v.HostPath)
	}

	// Probes point at the binary's endpoints on the --http port.
	httpAddr, ok := flagValue(args, "http")
	if !ok {
		t.Fatal("sidecar has no --http: probes and /metrics need it")
	}
	port := portOf(t, httpAddr)
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{
		{"startup", sc.StartupProbe, serve.PathReadyz},
		{"readiness", sc.ReadinessProbe, serve.PathReadyz},
		{"liveness", sc.LivenessProbe, serve.PathHealthz},
	} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("sidecar has no %s httpGet probe", p.name)
			continue
		}
		if p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s probe path %s, want %s", p.name, p.probe.HTTPGet.Path, p.path)
		}
		if got := deploy.ContainerPort(sc, p.probe.HTTPGet.Port.String()); got != port {
			t.Errorf("%s probe port %s resolves to %d, want the --http port %d", p.name, p.probe.HTTPGet.Port.String(), got, port)
		}
	}

	// Memory sized to the RAM cache; GOMEMLIMIT (if set) below the limit.
	ram, ok := flagValue(args, "ram-cache-size")
	if !ok {
		t.Fatal("sidecar has no --ram-cache-size")
	}
	ramBytes, err := cache.ParseSize(ram)
	if err != nil {
		t.Fatal(err)
	}
	memReq, memLim := sc.Resources.Requests.Memory().Value(), sc.Resources.Limits.Memory().Value()
	if memReq < ramBytes+1<<30 || memLim < memReq {
		t.Errorf("sidecar memory request %d / limit %d: want >= --ram-cache-size %s + 1GiB, limit >= request", memReq, memLim, ram)
	}
	for _, e := range sc.Env {
		if e.Name == "GOMEMLIMIT" {
			n, err := cache.ParseSize(e.Value)
			if err != nil || n >= memLim || n < ramBytes {
				t.Errorf("GOMEMLIMIT %q: want between the RAM cache and the memory limit", e.Value)
			}
		}
	}
	if _, ok := flagValue(args, "cache-size"); !ok {
		t.Error("sidecar has no --cache-size")
	}
	if !slices.Contains(args, "--allow-other") {
		t.Error("sidecar lacks --allow-other: the trainer runs as another uid")
	}
	if !slices.Contains(args, "--announce-any-user") {
		t.Error("sidecar lacks --announce-any-user: the trainer, another uid, could not announce its order")
	}
}

func prop(m corev1.VolumeMount) string {
	if m.MountPropagation == nil {
		return "(none)"
	}
	return string(*m.MountPropagation)
}

func checkUnprivileged(t *testing.T, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil || (sc.Privileged != nil && *sc.Privileged) ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
		t.Errorf("container %s: want unprivileged, allowPrivilegeEscalation false, capabilities drop [ALL]", c.Name)
	}
}

func checkWebhookDeployment(t *testing.T, d *appsv1.Deployment, objs []deploy.Object) {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	args, err := deploy.ExpandArgs(c, d.Namespace, objs)
	if err != nil {
		t.Fatal(err)
	}
	if len(args) == 0 || args[0] != "webhook" {
		t.Fatalf("args %v: want the webhook command", args)
	}
	listen, _ := flagValue(args, "listen")
	httpAddr, _ := flagValue(args, "http")
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.ReadinessProbe, serve.PathReadyz}, {c.LivenessProbe, serve.PathHealthz}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path ||
			deploy.ContainerPort(c, p.probe.HTTPGet.Port.String()) != portOf(t, httpAddr) {
			t.Errorf("probe %+v: want %s on the --http port %s", p.probe, p.path, httpAddr)
		}
	}
	// The TLS files come from the mounted Secret.
	cert, _ := flagValue(args, "tls-cert")
	key, _ := flagValue(args, "tls-key")
	mounted := false
	for _, m := range c.VolumeMounts {
		if path.Dir(cert) == m.MountPath && path.Dir(key) == m.MountPath {
			for _, v := range d.Spec.Template.Spec.Volumes {
				mounted = mounted || (v.Name == m.Name && v.Secret != nil)
			}
		}
	}
	if !mounted {
		t.Errorf("--tls-cert %s and --tls-key %s are not in a mounted Secret", cert, key)
	}
	// The Service reaches --listen, and the webhook configuration the Service.
	var svc *corev1.Service
	var mwc *admissionregistrationv1.MutatingWebhookConfiguration
	for _, o := range objs {
		switch x := o.Typed.(type) {
		case *corev1.Service:
			svc = x
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			mwc = x
		}
	}
	if svc == nil || mwc == nil || len(mwc.Webhooks) != 1 {
		t.Fatal("want one Service and one MutatingWebhookConfiguration with one webhook")
	}
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %s=%s does not select the Deployment's pods", k, v)
		}
	}
	w := mwc.Webhooks[0]
	cc := w.ClientConfig.Service
	if cc == nil || cc.Name != svc.Name || cc.Namespace != svc.Namespace || cc.Path == nil || *cc.Path != webhook.PathMutate {
		t.Fatalf("clientConfig.service %+v: want %s/%s path %s", cc, svc.Namespace, svc.Name, webhook.PathMutate)
	}
	found := false
	for _, p := range svc.Spec.Ports {
		if cc.Port != nil && p.Port == *cc.Port {
			found = true
			if got := deploy.ContainerPort(c, p.TargetPort.String()); got != portOf(t, listen) {
				t.Errorf("Service targetPort %s resolves to %d, want the --listen port %s", p.TargetPort.String(), got, listen)
			}
		}
	}
	if !found {
		t.Errorf("no Service port %v", cc.Port)
	}
	if w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone ||
		!slices.Contains(w.AdmissionReviewVersions, "v1") {
		t.Error("webhook must declare sideEffects None and admissionReviewVersions [v1]")
	}
	cond := fmt.Sprint(w.MatchConditions)
	if !strings.Contains(cond, webhook.AnnotationInject) {
		t.Errorf("matchConditions %s do not select on %s", cond, webhook.AnnotationInject)
	}
	if len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Resources, []string{"pods"}) ||
		!slices.Equal(w.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) {
		t.Errorf("rules %+v: want pods CREATE", w.Rules)
	}
}

// TestBenchOverlay: gen runs before the mount, the bench reads the mount
// and writes its reports into the PVC.
func TestBenchOverlay(t *testing.T) {
	objs := renderAll(t)["overlays/bench-imagenet"]
	var spec *corev1.PodSpec
	pvcs := map[string]bool{}
	for _, o := range objs {
		if s := deploy.PodSpec(o.Typed); s != nil {
			spec = s
		}
		if pvc, ok := o.Typed.(*corev1.PersistentVolumeClaim); ok {
			pvcs[pvc.Name] = true
		}
	}
	if spec == nil {
		t.Fatal("no Job")
	}
	var names []string
	for _, c := range spec.InitContainers {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, []string{"bench-gen", "dataccel"}) {
		t.Fatalf("init containers %v, want [bench-gen dataccel]", names)
	}
	gen, run := spec.InitContainers[0], spec.Containers[0]
	if gen.RestartPolicy != nil || !slices.Equal(gen.Args[:2], []string{"bench", "gen"}) {
		t.Fatalf("bench-gen: %v (a plain init container running bench gen)", gen.Args)
	}
	if !slices.Equal(run.Args[:2], []string{"bench", "run"}) || !strings.HasPrefix(run.Args[2], "/data/") {
		t.Fatalf("bench: %v (bench run on the mount)", run.Args)
	}
	for _, f := range []string{"json", "html"} {
		out, ok := flagValue(run.Args, f)
		if !ok {
			t.Fatalf("bench run has no --%s", f)
		}
		inVolume := false
		for _, m := range run.VolumeMounts {
			if strings.HasPrefix(out, m.MountPath+"/") {
				for _, v := range spec.Volumes {
					if v.Name == m.Name && v.PersistentVolumeClaim != nil && pvcs[v.PersistentVolumeClaim.ClaimName] {
						inVolume = true
					}
				}
			}
		}
		if !inVolume {
			t.Errorf("--%s %s is not in a PVC defined by the overlay", f, out)
		}
	}
	// gen writes where the sidecar mounts from.
	var cmNS string
	for _, o := range objs {
		if o.Kind() == "Job" {
			cmNS = o.Typed.(interface{ GetNamespace() string }).GetNamespace()
		}
	}
	genArgs, err := deploy.ExpandArgs(gen, cmNS, objs)
	if err != nil {
		t.Fatal(err)
	}
	mountArgs, err := deploy.ExpandArgs(spec.InitContainers[1], cmNS, objs)
	if err != nil {
		t.Fatal(err)
	}
	to, _ := flagValue(genArgs, "to")
	want := strings.TrimSuffix(mountArgs[1], "/") + strings.TrimPrefix(run.Args[2], mountArgs[2])
	if to != want {
		t.Errorf("bench gen --to %s, but bench run reads %s through the mount of %s (= %s)", to, run.Args[2], mountArgs[1], want)
	}
}

func TestExpandArgs(t *testing.T) {
	objs, err := deploy.Render(fstest.MapFS{
		"k/" + deploy.KustomizationFile: {Data: []byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [cm.yaml]\n")},
		"k/cm.yaml":                     {Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: ns}\ndata: {B: bucket, P: pre}\n")},
	}, "k")
	if err != nil {
		t.Fatal(err)
	}
	ctr := corev1.Container{
		Name:    "c",
		EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
		Env: []corev1.EnvVar{
			{Name: "X", Value: "x-$(B)"},
			{Name: "S", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}},
		},
	}
	tests := []struct {
		arg, want string
		err       bool
	}{
		{"s3://$(B)/$(P)", "s3://bucket/pre", false},
		{"$(X)", "x-bucket", false},
		{"$$(B)", "$(B)", false},
		{"$(S)", "", true},
		{"$(NOPE)", "", true},
	}
	for _, tt := range tests {
		ctr.Args = []string{tt.arg}
		got, err := deploy.ExpandArgs(ctr, "ns", objs)
		if tt.err {
			if err == nil {
				t.Errorf("%s: want error, got %v", tt.arg, got)
			}
			continue
		}
		if err != nil || got[0] != tt.want {
			t.Errorf("%s: got %v, %v; want %s", tt.arg, got, err, tt.want)
		}
	}
}
