package deploy

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/yaml"

	"github.com/dataccel/dataccel/webhook/jsonpatch"
)

//go:embed base overlays webhook
var manifests embed.FS

// Files returns the manifests under deploy/ (base, overlays, webhook).
func Files() fs.FS { return manifests }

// Kustomization is the subset of kustomize.config.k8s.io/v1beta1 the
// manifests use. Decoding is strict: any other field is an error.
type Kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources,omitempty"`
	Patches    []Patch  `json:"patches,omitempty"`
	Images     []Image  `json:"images,omitempty"`
}

// Patch is a JSON 6902 patch file applied to the objects matching Target.
type Patch struct {
	Path   string      `json:"path"`
	Target PatchTarget `json:"target"`
}

// PatchTarget selects objects by group, version, kind and name.
type PatchTarget struct {
	Group   string `json:"group,omitempty"`
	Version string `json:"version,omitempty"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`
}

// Image rewrites container images named Name.
type Image struct {
	Name    string `json:"name"`
	NewName string `json:"newName,omitempty"`
	NewTag  string `json:"newTag,omitempty"`
	Digest  string `json:"digest,omitempty"`
}

// Object is one rendered manifest: where it came from, its JSON, and its
// strictly decoded typed form.
type Object struct {
	Source string         // file (and document index) it came from
	JSON   []byte         // the rendered object
	Typed  runtime.Object // *batchv1.Job, *corev1.ConfigMap, ...
}

// Kind returns the object's kind.
func (o Object) Kind() string { return o.Typed.GetObjectKind().GroupVersionKind().Kind }

func (o Object) meta() (name, namespace string) {
	var m struct {
		Metadata struct{ Name, Namespace string }
	}
	json.Unmarshal(o.JSON, &m)
	return m.Metadata.Name, m.Metadata.Namespace
}

// Name returns metadata.name.
func (o Object) Name() string { n, _ := o.meta(); return n }

// newDecoder returns a strict decoder for the API types the manifests use:
// unknown fields, duplicate fields and case-mismatched fields are errors.
func newDecoder() (runtime.Decoder, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme,
		admissionregistrationv1.AddToScheme, policyv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("scheme: %w", err)
		}
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer(), nil
}

// DecodeFile strictly decodes every document of a manifest file.
func DecodeFile(fsys fs.FS, name string) ([]Object, error) {
	dec, err := newDecoder()
	if err != nil {
		return nil, err
	}
	raw, err := readDocs(fsys, name)
	if err != nil {
		return nil, err
	}
	out := make([]Object, 0, len(raw))
	for _, r := range raw {
		o, err := decodeObject(dec, r.source, r.json)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

func decodeObject(dec runtime.Decoder, source string, js []byte) (Object, error) {
	obj, _, err := dec.Decode(js, nil, nil)
	if err != nil {
		return Object{}, fmt.Errorf("%s: %w", source, err)
	}
	return Object{Source: source, JSON: js, Typed: obj}, nil
}

type rawDoc struct {
	source string
	json   []byte
}

// docSep splits YAML streams on "---" lines.
var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

func readDocs(fsys fs.FS, name string) ([]rawDoc, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	var out []rawDoc
	for i, doc := range docSep.Split(string(b), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		// Strict: duplicate keys are an error.
		js, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			return nil, fmt.Errorf("%s (document %d): %w", name, i, err)
		}
		out = append(out, rawDoc{source: fmt.Sprintf("%s#%d", name, i), json: js})
	}
	return out, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Render renders the kustomization in dir of fsys and decodes every
// resulting object strictly.
func Render(fsys fs.FS, dir string) ([]Object, error) {
	dec, err := newDecoder()
	if err != nil {
		return nil, err
	}
	docs, err := render(fsys, path.Clean(dir), map[string]bool{})
	if err != nil {
		return nil, err
	}
	out := make([]Object, 0, len(docs))
	seen := map[string]string{}
	for _, d := range docs {
		o, err := decodeObject(dec, d.source, d.json)
		if err != nil {
			return nil, err
		}
		gvk := o.Typed.GetObjectKind().GroupVersionKind()
		name, ns := o.meta()
		id := gvk.Group + "/" + gvk.Kind + "/" + ns + "/" + name
		if prev, dup := seen[id]; dup {
			return nil, fmt.Errorf("%s: %s %s/%s already defined in %s", d.source, gvk.Kind, ns, name, prev)
		}
		seen[id] = d.source
		out = append(out, o)
	}
	return out, nil
}

// KustomizationFile is the file name kustomize looks for.
const KustomizationFile = "kustomization.yaml"

func readKustomization(fsys fs.FS, dir string) (Kustomization, error) {
	var k Kustomization
	b, err := fs.ReadFile(fsys, path.Join(dir, KustomizationFile))
	if err != nil {
		return k, fmt.Errorf("kustomization: %w", err)
	}
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		return k, fmt.Errorf("%s/%s (only resources, patches and images are supported): %w", dir, KustomizationFile, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		return k, fmt.Errorf("%s/%s: apiVersion/kind %s/%s, want kustomize.config.k8s.io/v1beta1 Kustomization", dir, KustomizationFile, k.APIVersion, k.Kind)
	}
	return k, nil
}

func render(fsys fs.FS, dir string, visiting map[string]bool) ([]rawDoc, error) {
	if visiting[dir] {
		return nil, fmt.Errorf("kustomization cycle through %s", dir)
	}
	visiting[dir] = true
	defer delete(visiting, dir)
	k, err := readKustomization(fsys, dir)
	if err != nil {
		return nil, err
	}
	var docs []rawDoc
	for _, r := range k.Resources {
		p := path.Clean(path.Join(dir, r))
		if !fs.ValidPath(p) {
			return nil, fmt.Errorf("%s: resource %q leaves deploy/", dir, r)
		}
		fi, err := fs.Stat(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("%s: resource %q: %w", dir, r, err)
		}
		var sub []rawDoc
		if fi.IsDir() {
			sub, err = render(fsys, p, visiting)
		} else {
			sub, err = readDocs(fsys, p)
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, sub...)
	}
	for _, pt := range k.Patches {
		if docs, err = applyPatch(fsys, dir, pt, docs); err != nil {
			return nil, err
		}
	}
	for i := range docs {
		if docs[i].json, err = setImages(docs[i].json, k.Images); err != nil {
			return nil, fmt.Errorf("%s: images: %w", docs[i].source, err)
		}
	}
	return docs, nil
}

func applyPatch(fsys fs.FS, dir string, pt Patch, docs []rawDoc) ([]rawDoc, error) {
	file := path.Clean(path.Join(dir, pt.Path))
	b, err := fs.ReadFile(fsys, file)
	if err != nil {
		return nil, fmt.Errorf("%s: patch: %w", dir, err)
	}
	var ops []jsonpatch.Operation
	if err := yaml.UnmarshalStrict(b, &ops); err != nil {
		return nil, fmt.Errorf("%s: want a JSON 6902 patch (a list of operations): %w", file, err)
	}
	matched := 0
	for i, d := range docs {
		var m struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct{ Name string }
		}
		if err := json.Unmarshal(d.json, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", d.source, err)
		}
		group, version := "", m.APIVersion
		if g, v, ok := strings.Cut(m.APIVersion, "/"); ok {
			group, version = g, v
		}
		t := pt.Target
		if t.Kind != m.Kind || t.Name != m.Metadata.Name || t.Group != group || (t.Version != "" && t.Version != version) {
			continue
		}
		var doc any
		if err := json.Unmarshal(d.json, &doc); err != nil {
			return nil, err
		}
		if doc, err = jsonpatch.Apply(doc, ops); err != nil {
			return nil, fmt.Errorf("%s on %s: %w", file, d.source, err)
		}
		if docs[i].json, err = json.Marshal(doc); err != nil {
			return nil, err
		}
		docs[i].source += " patched by " + file
		matched++
	}
	if matched == 0 {
		return nil, fmt.Errorf("%s: target %+v matches no resource", file, pt.Target)
	}
	return docs, nil
}

// setImages applies kustomize's images transformer to the containers and
// init containers of pods and pod templates.
func setImages(js []byte, images []Image) ([]byte, error) {
	if len(images) == 0 {
		return js, nil
	}
	var doc map[string]any
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil, err
	}
	spec, _ := doc["spec"].(map[string]any)
	podSpecs := []map[string]any{spec}
	if tmpl, ok := spec["template"].(map[string]any); ok {
		if s, ok := tmpl["spec"].(map[string]any); ok {
			podSpecs = append(podSpecs, s)
		}
	}
	for _, ps := range podSpecs {
		for _, key := range []string{"initContainers", "containers"} {
			list, _ := ps[key].([]any)
			for _, c := range list {
				ctr, _ := c.(map[string]any)
				img, _ := ctr["image"].(string)
				ctr["image"] = rewriteImage(img, images)
			}
		}
	}
	return json.Marshal(doc)
}

func rewriteImage(img string, images []Image) string {
	name, tag, digest := img, "", ""
	if n, d, ok := strings.Cut(name, "@"); ok {
		name, digest = n, d
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name, tag = name[:i], name[i+1:]
	}
	for _, im := range images {
		if im.Name != name {
			continue
		}
		if im.NewName != "" {
			name = im.NewName
		}
		if im.NewTag != "" {
			tag, digest = im.NewTag, ""
		}
		if im.Digest != "" {
			tag, digest = "", im.Digest
		}
	}
	out := name
	if tag != "" {
		out += ":" + tag
	}
	if digest != "" {
		out += "@" + digest
	}
	return out
}

// Kustomizations lists the directories of fsys that hold a kustomization.
func Kustomizations(fsys fs.FS) ([]string, error) {
	var dirs []string
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == KustomizationFile {
			dirs = append(dirs, path.Dir(p))
		}
		return nil
	})
	sort.Strings(dirs)
	return dirs, err
}

// ManifestFiles lists every .yaml/.yml file of fsys.
func ManifestFiles(fsys fs.FS) ([]string, error) {
	var files []string
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			files = append(files, p)
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

// PodSpec returns the pod spec of a Pod, Job or Deployment (nil otherwise).
func PodSpec(obj runtime.Object) *corev1.PodSpec {
	switch o := obj.(type) {
	case *corev1.Pod:
		return &o.Spec
	case *batchv1.Job:
		return &o.Spec.Template.Spec
	case *appsv1.Deployment:
		return &o.Spec.Template.Spec
	}
	return nil
}

// varRef is a $(NAME) reference in a command or argument.
var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// ErrUnresolved means an argument references a variable the container's
// environment does not define (the kubelet would pass it on verbatim).
var ErrUnresolved = errors.New("unresolved $(VAR) reference")

// ExpandArgs expands $(VAR) in the container's args the way the kubelet
// does, from the container's env values and the ConfigMaps among objs
// (env valueFrom.configMapKeyRef and envFrom.configMapRef, in the pod's
// namespace). Variables from Secrets are not expanded: an argument must
// never carry a credential, so such a reference is reported as unresolved.
func ExpandArgs(ctr corev1.Container, namespace string, objs []Object) ([]string, error) {
	cms := map[string]map[string]string{}
	for _, o := range objs {
		if cm, ok := o.Typed.(*corev1.ConfigMap); ok && cm.Namespace == namespace {
			cms[cm.Name] = cm.Data
		}
	}
	env := map[string]string{}
	for _, ef := range ctr.EnvFrom {
		if ef.ConfigMapRef == nil {
			continue
		}
		data, ok := cms[ef.ConfigMapRef.Name]
		if !ok {
			return nil, fmt.Errorf("container %s: envFrom ConfigMap %s/%s is not among the manifests", ctr.Name, namespace, ef.ConfigMapRef.Name)
		}
		for k, v := range data {
			env[ef.Prefix+k] = v
		}
	}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name], _ = expand(e.Value, env)
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			v, ok := cms[ref.Name][ref.Key]
			if !ok {
				return nil, fmt.Errorf("container %s: env %s: ConfigMap key %s/%s.%s is not among the manifests", ctr.Name, e.Name, namespace, ref.Name, ref.Key)
			}
			env[e.Name] = v
		default:
			delete(env, e.Name)
		}
	}
	out := make([]string, len(ctr.Args))
	for i, a := range ctr.Args {
		var missing bool
		if out[i], missing = expand(a, env); missing {
			return nil, fmt.Errorf("container %s: arg %q: %w", ctr.Name, a, ErrUnresolved)
		}
	}
	return out, nil
}

// expand replaces $(NAME) from env and $$ by $; missing reports a
// reference env does not define (left as is, as the kubelet does).
func expand(s string, env map[string]string) (out string, missing bool) {
	out = varRef.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		name := m[2 : len(m)-1]
		if v, ok := env[name]; ok {
			return v
		}
		missing = true
		return m
	})
	return out, missing
}

// ContainerPort resolves a probe or service port (number or name) against
// a container's ports; 0 when it does not resolve.
func ContainerPort(ctr corev1.Container, port string) int32 {
	for _, p := range ctr.Ports {
		if p.Name == port || fmt.Sprint(p.ContainerPort) == port {
			return p.ContainerPort
		}
	}
	return 0
}
