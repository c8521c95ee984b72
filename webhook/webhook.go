// Package webhook owns the dataccel mutating admission webhook: it reads
// the dataccel.io/* annotations of a pod, validates them, and answers an
// AdmissionReview with a JSON patch that adds the dataccel native sidecar
// (an init container with restartPolicy Always), its volumes, and the
// dataset mount in every regular container. It also owns the HTTP handler
// for AdmissionReview requests and the reloading TLS key pair the command
// serves them with.
//
// It does not own flags, logging setup or the listener (cmd/dataccel wires
// those), nor the mount itself: the sidecar runs `dataccel mount`. The
// injected sidecar mirrors deploy/base: keep the two in step (the
// cmd/dataccel tests parse both sidecars' arguments with the real command).
package webhook

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/dataccel/dataccel/cache"
)

// Annotations read (and, for Status, written) by the webhook.
const (
	// AnnotationInject turns injection on: "true" injects, "false" or no
	// annotation leaves the pod unchanged, anything else is rejected.
	AnnotationInject = "dataccel.io/inject"
	// AnnotationBucket is the bucket to mount (required with inject).
	AnnotationBucket = "dataccel.io/bucket"
	// AnnotationPrefix is the key prefix inside the bucket (default: none).
	AnnotationPrefix = "dataccel.io/prefix"
	// AnnotationMountPath is where containers see the dataset (default /data).
	AnnotationMountPath = "dataccel.io/mount-path"
	// AnnotationCacheSize bounds the NVMe cache, e.g. "400GiB".
	AnnotationCacheSize = "dataccel.io/cache-size"
	// AnnotationRAMCacheSize bounds the RAM cache, e.g. "8GiB"; the
	// sidecar's memory request and limit are sized from it.
	AnnotationRAMCacheSize = "dataccel.io/ram-cache-size"
	// AnnotationMemory sets the sidecar's memory request and limit, at
	// least the RAM cache and memoryHeadroom: a dataset of many files needs
	// about 1 KiB more per file for its listings once it is listed.
	AnnotationMemory = "dataccel.io/memory"
	// AnnotationEndpoint overrides the webhook's default S3 endpoint.
	AnnotationEndpoint = "dataccel.io/endpoint"
	// AnnotationRegion overrides the webhook's default S3 region, for a
	// bucket that lives elsewhere; e.g. "eu-central-1".
	AnnotationRegion = "dataccel.io/region"
	// AnnotationSecret names the Secret (in the pod's namespace) holding
	// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
	AnnotationSecret = "dataccel.io/secret"
	// AnnotationCredentials says where the sidecar's keys come from:
	// "secret" (the default: AnnotationSecret's keys) or "pod": the pod's
	// own identity, EKS IRSA or Pod Identity, whose environment and token
	// mount the sidecar takes from the first container that has them (or
	// else the node's instance profile). Temporary keys are renewed.
	AnnotationCredentials = "dataccel.io/credentials"
	// AnnotationHTTPPort overrides the sidecar's /metrics, /healthz and
	// /readyz port; required on hostNetwork pods (see checkHTTPPort).
	AnnotationHTTPPort = "dataccel.io/http-port"
	// AnnotationSweep: "false" turns off the sidecar's sweep (--sweep), for
	// a job that reads only a few files of each directory; "true" (the
	// default) leaves it on.
	AnnotationSweep = "dataccel.io/sweep"
	// AnnotationStatus is set to "injected" on pods the webhook changed.
	AnnotationStatus = "dataccel.io/status"
)

// Names of what the webhook adds to a pod.
const (
	SidecarName      = "dataccel"
	DataVolumeName   = "dataccel-data"
	CacheVolumeName  = "dataccel-cache"
	HTTPPortName     = "dataccel-http"
	sidecarCacheDir  = "/cache"
	sidecarReadyFile = "/tmp/ready"
)

// Config is the webhook's side of the sidecar: what the cluster operator
// sets once, as opposed to what each pod asks for in its annotations.
type Config struct {
	Image           string            // the dataccel image (required)
	ImagePullPolicy corev1.PullPolicy // default IfNotPresent
	Endpoint        string            // default S3 endpoint; "" means AWS S3
	Region          string            // default S3 region; "" leaves the binary's default
	Secret          string            // default credentials Secret name
	Credentials     string            // default AnnotationCredentials: "secret" (when empty) or "pod"
	CacheHostPath   string            // node-local NVMe directory; one subdirectory per bucket/prefix
	CacheSize       string            // default NVMe cache bound
	RAMCacheSize    string            // default RAM cache bound
	MountPath       string            // default mount path in the containers
	MaxInflight     int               // concurrent GETs per mount
	HTTPPort        int32             // the sidecar's /metrics, /healthz, /readyz port
	MetadataTTL     string            // --metadata-ttl of the sidecar
	OutageGrace     string            // --outage-grace of the sidecar
}

// Defaults used for Config fields left empty.
const (
	DefaultSecret        = "dataccel-s3"
	DefaultCacheHostPath = "/mnt/nvme/dataccel"
	DefaultCacheSize     = "100GiB"
	DefaultRAMCacheSize  = "4GiB"
	DefaultMountPath     = "/data"
	DefaultMaxInflight   = 128
	DefaultHTTPPort      = 9100
	DefaultMetadataTTL   = "1h"
	DefaultOutageGrace   = "15m"
	// MaxInflightLimit is the most GETs in flight the sidecar's
	// --max-inflight takes.
	MaxInflightLimit = 4096
)

// memoryHeadroom is added to the RAM cache for the sidecar's memory request
// and limit: prefetch buffers, in-flight GET bodies, the FUSE layer and the
// Go runtime.
const memoryHeadroom = 2 << 30

// WithDefaults returns c with empty fields filled.
func (c Config) WithDefaults() Config {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = corev1.PullIfNotPresent
	}
	if c.Secret == "" {
		c.Secret = DefaultSecret
	}
	if c.Credentials == "" {
		c.Credentials = "secret"
	}
	if c.CacheHostPath == "" {
		c.CacheHostPath = DefaultCacheHostPath
	}
	if c.CacheSize == "" {
		c.CacheSize = DefaultCacheSize
	}
	if c.RAMCacheSize == "" {
		c.RAMCacheSize = DefaultRAMCacheSize
	}
	if c.MountPath == "" {
		c.MountPath = DefaultMountPath
	}
	if c.MaxInflight == 0 {
		c.MaxInflight = DefaultMaxInflight
	}
	if c.HTTPPort == 0 {
		c.HTTPPort = DefaultHTTPPort
	}
	if c.MetadataTTL == "" {
		c.MetadataTTL = DefaultMetadataTTL
	}
	if c.OutageGrace == "" {
		c.OutageGrace = DefaultOutageGrace
	}
	return c
}

// Validate checks the operator's configuration, including the defaults a
// pod inherits, so a bad flag fails at start rather than on every pod.
func (c Config) Validate() error {
	if c.Image == "" {
		return fmt.Errorf("image is required")
	}
	switch c.ImagePullPolicy {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return fmt.Errorf("image pull policy %q: want Always, IfNotPresent or Never", c.ImagePullPolicy)
	}
	if !path.IsAbs(c.CacheHostPath) || path.Clean(c.CacheHostPath) != c.CacheHostPath || c.CacheHostPath == "/" {
		return fmt.Errorf("cache host path %q: want a clean absolute directory other than /", c.CacheHostPath)
	}
	if c.MaxInflight < 1 || c.MaxInflight > MaxInflightLimit {
		return fmt.Errorf("max inflight %d: want 1..%d (the sidecar's bound)", c.MaxInflight, MaxInflightLimit)
	}
	if ttl, err := time.ParseDuration(c.MetadataTTL); err != nil || ttl <= 0 {
		return fmt.Errorf("metadata ttl %q: want a positive duration such as 1h or 90s", c.MetadataTTL)
	}
	if grace, err := time.ParseDuration(c.OutageGrace); err != nil || grace < 0 {
		return fmt.Errorf("outage grace %q: want a duration such as 15m, or 0s for none", c.OutageGrace)
	}
	if c.HTTPPort < 1 || c.HTTPPort > 65535 {
		return fmt.Errorf("http port %d: out of range", c.HTTPPort)
	}
	if c.Region != "" && !regionRE.MatchString(c.Region) {
		return fmt.Errorf("region %q: %s", c.Region, regionWant)
	}
	if c.Credentials != "" && c.Credentials != "secret" && c.Credentials != "pod" {
		return fmt.Errorf("credentials %q: want secret or pod", c.Credentials)
	}
	// The defaults go through the same checks as annotations.
	_, err := c.settings(map[string]string{AnnotationBucket: "placeholder-bucket"})
	return err
}

// settings is what one pod gets: Config defaults overridden by annotations.
type settings struct {
	namespace                 string // the pod's: its cache is its namespace's alone
	bucket, prefix, mountPath string
	cacheSize, ramCacheSize   string
	memBytes                  int64 // the sidecar's memory: RAM cache + headroom, or AnnotationMemory
	endpoint, region, secret  string
	podIdentity               bool // AnnotationCredentials "pod": no Secret
	httpPort                  int32
	httpPortSet               bool // the pod chose the port (AnnotationHTTPPort)
	hostNetwork               bool // the pod's ports are the node's
	noSweep                   bool // AnnotationSweep "false"
}

// AnnotationError is a bad annotation; its message names the annotation,
// the value and what was expected.
type AnnotationError struct {
	Key, Value, Want string
}

func (e *AnnotationError) Error() string {
	return fmt.Sprintf("annotation %s=%q: %s", e.Key, e.Value, e.Want)
}

var bucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// regionRE is a plain region name: AWS's (us-east-1, eu-central-1) and the
// other stores' ("auto", "default", "nyc3", "US", zone groups with "_" or
// "."). It starts with a letter or digit, so the value cannot pass for a
// flag of the sidecar, and holds no space, "/" or "=".
var regionRE = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62}[A-Za-z0-9])?$`)

const regionWant = `want a region name such as "us-east-1" or "eu-central-1": up to 64 letters, digits, '.', '-' or '_', starting and ending with a letter or digit`

func (c Config) settings(ann map[string]string) (settings, error) {
	s := settings{
		bucket:       ann[AnnotationBucket],
		prefix:       ann[AnnotationPrefix],
		mountPath:    valueOr(ann, AnnotationMountPath, c.MountPath),
		cacheSize:    valueOr(ann, AnnotationCacheSize, c.CacheSize),
		ramCacheSize: valueOr(ann, AnnotationRAMCacheSize, c.RAMCacheSize),
		endpoint:     valueOr(ann, AnnotationEndpoint, c.Endpoint),
		region:       valueOr(ann, AnnotationRegion, c.Region),
		secret:       valueOr(ann, AnnotationSecret, c.Secret),
		httpPort:     c.HTTPPort,
	}
	if s.bucket == "" {
		return s, &AnnotationError{AnnotationBucket, "", "required when " + AnnotationInject + ` is "true"`}
	}
	if !bucketRE.MatchString(s.bucket) || strings.Contains(s.bucket, "..") {
		return s, &AnnotationError{AnnotationBucket, s.bucket, "want an S3 bucket name: 3-63 lower-case letters, digits, '.' or '-', starting and ending with a letter or digit"}
	}
	if err := checkPrefix(s.prefix); err != "" {
		return s, &AnnotationError{AnnotationPrefix, s.prefix, err}
	}
	if err := checkMountPath(s.mountPath); err != "" {
		return s, &AnnotationError{AnnotationMountPath, s.mountPath, err}
	}
	// The disk cache may be a share of the cache filesystem, as the
	// binary allows; the RAM cache must be a size: it sizes the memory.
	if n, err := cache.ParseSizeOrPercent(s.cacheSize, 1<<40); err != nil || n <= 0 {
		return s, &AnnotationError{AnnotationCacheSize, s.cacheSize, `want a positive size such as "400GiB" or "500G", or a share of the disk such as "80%"`}
	}
	n, err := cache.ParseSize(s.ramCacheSize)
	switch {
	case err != nil || n <= 0:
		return s, &AnnotationError{AnnotationRAMCacheSize, s.ramCacheSize, `want a positive size such as "8GiB" (it sizes the sidecar's memory)`}
	case n > 4<<40:
		return s, &AnnotationError{AnnotationRAMCacheSize, s.ramCacheSize, "want at most 4TiB"}
	}
	s.memBytes = n + memoryHeadroom
	if v, ok := ann[AnnotationMemory]; ok {
		q, err := resource.ParseQuantity(v)
		switch {
		case err != nil:
			return s, &AnnotationError{AnnotationMemory, v, `want a memory quantity such as "12Gi"`}
		case q.Value() < s.memBytes:
			return s, &AnnotationError{AnnotationMemory, v, fmt.Sprintf("want at least the RAM cache and %s (%s here; about 1 KiB more per file of the dataset)",
				resource.NewQuantity(memoryHeadroom, resource.BinarySI), resource.NewQuantity(s.memBytes, resource.BinarySI))}
		}
		s.memBytes = q.Value()
	}
	if s.endpoint != "" {
		u, err := url.Parse(s.endpoint)
		switch {
		case strings.Contains(s.endpoint, "@"): // user info, parsed or not
			// Never echo a credential back: the message omits the value.
			return s, &AnnotationError{AnnotationEndpoint, "(redacted)", "must not carry credentials; put them in the Secret"}
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			return s, &AnnotationError{AnnotationEndpoint, s.endpoint, "want an http:// or https:// URL"}
		case u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/"):
			return s, &AnnotationError{AnnotationEndpoint, s.endpoint, "want scheme://host[:port] only"}
		}
	}
	if s.region != "" && !regionRE.MatchString(s.region) {
		return s, &AnnotationError{AnnotationRegion, s.region, regionWant}
	}
	switch creds := valueOr(ann, AnnotationCredentials, cmp.Or(c.Credentials, "secret")); creds {
	case "secret":
	case "pod":
		s.podIdentity, s.secret = true, ""
	default:
		return s, &AnnotationError{AnnotationCredentials, creds, `want "secret" (the keys in the Secret ` + AnnotationSecret + ` names) or "pod" (the pod's IRSA or Pod Identity, else the node's instance profile)`}
	}
	if errs := validation.IsDNS1123Subdomain(s.secret); !s.podIdentity && len(errs) > 0 {
		return s, &AnnotationError{AnnotationSecret, s.secret, "want a Secret name: " + strings.Join(errs, "; ")}
	}
	switch v := valueOr(ann, AnnotationSweep, "true"); v {
	case "true":
	case "false":
		s.noSweep = true
	default:
		return s, &AnnotationError{AnnotationSweep, v, `want "false" (a job that reads only a few files of each directory) or "true" (the default: an epoch reads every file)`}
	}
	if v, ok := ann[AnnotationHTTPPort]; ok {
		// Digits only: ParseUint takes no sign or space.
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n == 0 {
			return s, &AnnotationError{AnnotationHTTPPort, v, "want a TCP port number, 1-65535"}
		}
		s.httpPort, s.httpPortSet = int32(n), true
	}
	return s, nil
}

func valueOr(m map[string]string, k, def string) string {
	if v, ok := m[k]; ok {
		return v
	}
	return def
}

func checkPrefix(p string) string {
	if p == "" {
		return ""
	}
	if len(p) > 1024 {
		return "want at most 1024 bytes"
	}
	if strings.HasPrefix(p, "/") {
		return `want a key prefix without a leading "/" (e.g. "imagenet/train")`
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return "must not contain control characters"
		}
	}
	for i, seg := range strings.Split(strings.TrimSuffix(p, "/"), "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Sprintf("segment %d is %q: want no empty, \".\" or \"..\" segments", i+1, seg)
		}
	}
	return ""
}

func checkMountPath(p string) string {
	switch {
	case !path.IsAbs(p) || path.Clean(p) != p:
		return `want a clean absolute path such as "/data"`
	case p == "/":
		return "must not be /"
	case strings.ContainsAny(p, ":\x00"):
		return `must not contain ":"`
	}
	for _, reserved := range []string{"/dev", "/proc", "/sys", "/etc", "/var/run/secrets", sidecarCacheDir} {
		if p == reserved || strings.HasPrefix(p, reserved+"/") {
			return "must not be under " + reserved
		}
	}
	// The sidecar's binary (/usr/local/bin/dataccel) would be hidden.
	for _, dir := range []string{"/usr", "/usr/local", "/usr/local/bin", "/bin", "/lib"} {
		if p == dir {
			return "must not be " + dir + " (it would hide the sidecar's own files)"
		}
	}
	return ""
}

// cacheSubdir is one dataset's cache directory, relative to the node's
// cache root (CacheHostPath, /cache in the sidecar), under the pod's
// namespace: a mount serves what its cache holds (listings and blocks)
// without asking the store, so a pod of another namespace, with other
// credentials, must not read the same cache. The disk cache locks
// its directory, so two datasets must not share one, nor one lie inside
// another (a cache refuses a directory that holds other files, and removes
// some of its own subdirectories). The prefix is one path element, its
// slashes escaped ("imagenet/train" is imagenet%2Ftrain), and the bucket's
// root is %2F: no prefix's directory nests in another's. The sidecar makes
// it (mount's --cache-dir is created if missing).
func cacheSubdir(s settings) string {
	leaf := url.PathEscape(strings.TrimSuffix(s.prefix, "/"))
	if leaf == "" {
		leaf = "%2F"
	}
	// A name is at most 255 bytes: a long prefix keeps its start and a
	// hash of the whole (another prefix would need that very hash in its
	// own name to get the same one).
	if len(leaf) > maxNameLen {
		sum := sha256.Sum256([]byte(s.prefix))
		leaf = leaf[:maxNameLen-34] + "~" + hex.EncodeToString(sum[:16])
	}
	return path.Join(s.namespace, s.bucket, leaf)
}

// maxNameLen is the longest file name of Linux file systems.
const maxNameLen = 255

// SidecarArgs is the command line of the injected sidecar (after the
// image's entrypoint, which is the dataccel binary).
func (c Config) sidecarArgs(s settings) []string {
	// A URL, escaped: a prefix may hold "%", "?" or "#", which the
	// sidecar's parse of a bare "s3://bucket/prefix" would decode or cut.
	src := (&url.URL{Scheme: "s3", Host: s.bucket, Path: "/" + s.prefix}).String()
	args := []string{"mount", src, s.mountPath}
	if s.endpoint != "" {
		args = append(args, "--endpoint="+s.endpoint)
	}
	if s.region != "" {
		args = append(args, "--region="+s.region)
	}
	args = append(args,
		"--cache-dir="+path.Join(sidecarCacheDir, cacheSubdir(s)),
		"--cache-size="+s.cacheSize,
		"--ram-cache-size="+s.ramCacheSize,
		"--max-inflight="+strconv.Itoa(c.MaxInflight),
		"--prefetch=on",
		"--http=:"+strconv.Itoa(int(s.httpPort)),
		"--ready-file="+sidecarReadyFile,
		"--metadata-ttl="+c.MetadataTTL,
		"--outage-grace="+c.OutageGrace,
		// The trainer runs as another uid; without allow_other the kernel
		// refuses it (and the container runtime) access to the mount.
		"--allow-other",
		// The pod's containers alone see the mount: whatever user the
		// trainer runs as may announce its order.
		"--announce-any-user",
	)
	if s.noSweep {
		args = append(args, "--sweep=false")
	}
	// The kubelet expands $(VAR) in args, and turns $$ into $: a prefix or
	// a path from an annotation must reach the sidecar as written (else
	// "a$$b" mounts "a$b", and "$(AWS_SECRET_ACCESS_KEY)" puts the secret
	// in argv and the logs).
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "$", "$$")
	}
	return args
}

func (c Config) sidecar(s settings) corev1.Container {
	always := corev1.ContainerRestartPolicyAlways
	privileged := true
	root := int64(0)
	nonRoot := false
	mem := resource.NewQuantity(s.memBytes, resource.BinarySI)
	bidi := corev1.MountPropagationBidirectional
	probe := func(p string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: p, Port: intstr.FromString(HTTPPortName),
			}},
			PeriodSeconds:    period,
			TimeoutSeconds:   2,
			FailureThreshold: failures,
		}
	}
	port := corev1.ContainerPort{Name: HTTPPortName, ContainerPort: s.httpPort, Protocol: corev1.ProtocolTCP}
	if s.hostNetwork {
		// The API server defaults it so too; said outright, the
		// scheduler's host-port check keeps a second pod that wants this
		// node port off the node instead of letting its sidecar fail to bind.
		port.HostPort = s.httpPort
	}
	secretEnv := func(name string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: s.secret}, Key: name,
		}}}
	}
	// A soft limit for the Go runtime, below the container's limit.
	env := []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: strconv.FormatInt(mem.Value()/10*9, 10)}}
	if !s.podIdentity {
		env = append([]corev1.EnvVar{secretEnv("AWS_ACCESS_KEY_ID"), secretEnv("AWS_SECRET_ACCESS_KEY")}, env...)
	}
	return corev1.Container{
		Name:            SidecarName,
		Image:           c.Image,
		ImagePullPolicy: c.ImagePullPolicy,
		Args:            c.sidecarArgs(s),
		RestartPolicy:   &always,
		Env:             env,
		// The probes name the port, so they follow the pod's choice.
		Ports: []corev1.ContainerPort{port},
		// Startup: the mount must serve before the next containers start
		// (up to 5 minutes: a cold listing of a large prefix takes time).
		StartupProbe:   probe("/readyz", 2, 150),
		ReadinessProbe: probe("/readyz", 10, 3),
		LivenessProbe:  probe("/healthz", 10, 6),
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: *mem},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: *mem},
		},
		// privileged: Kubernetes accepts mountPropagation Bidirectional only
		// in privileged containers; it also grants /dev/fuse and
		// CAP_SYS_ADMIN, which mount(2) of a FUSE file system needs.
		// RunAsNonRoot false, said outright: a pod-level runAsNonRoot: true
		// (common in training pods) is inherited otherwise, and the kubelet
		// refuses to start a container that runs as root under it.
		SecurityContext: &corev1.SecurityContext{Privileged: &privileged, RunAsUser: &root, RunAsNonRoot: &nonRoot},
		VolumeMounts: []corev1.VolumeMount{
			{Name: DataVolumeName, MountPath: s.mountPath, MountPropagation: &bidi},
			{Name: CacheVolumeName, MountPath: sidecarCacheDir},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// identityEnv is the environment by which EKS gives a pod its AWS identity
// (IRSA, Pod Identity) that the sidecar reads, and the region: dataccel's
// --region defaults to $AWS_REGION. (It always asks the regional STS, so
// AWS_STS_REGIONAL_ENDPOINTS is not copied.)
var identityEnv = []string{"AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_SESSION_NAME",
	"AWS_ENDPOINT_URL_STS", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
	"AWS_REGION"}

// podIdentity returns the identity environment of the first container of
// pod that has one (AWS_ROLE_ARN or AWS_CONTAINER_CREDENTIALS_FULL_URI),
// and that container's mounts holding its token files. EKS's own webhook
// adds these to the containers it sees; the sidecar, added by this
// webhook, may come after it.
func podIdentity(pod *corev1.Pod) ([]corev1.EnvVar, []corev1.VolumeMount) {
	for _, ctr := range append(slices.Clone(pod.Spec.Containers), pod.Spec.InitContainers...) {
		var env []corev1.EnvVar
		var files []string
		for _, e := range ctr.Env {
			if slices.Contains(identityEnv, e.Name) {
				env = append(env, e)
				if strings.HasSuffix(e.Name, "_FILE") && e.Value != "" {
					files = append(files, e.Value)
				}
			}
		}
		if !slices.ContainsFunc(env, func(e corev1.EnvVar) bool {
			return e.Name == "AWS_ROLE_ARN" || e.Name == "AWS_CONTAINER_CREDENTIALS_FULL_URI"
		}) {
			continue
		}
		var mounts []corev1.VolumeMount
		for _, f := range files {
			// The mount that holds the file: the deepest one on its path
			// (the file itself with subPath), never a wider one such as a
			// hostPath /var that happens to contain it.
			best := -1
			for i, m := range ctr.VolumeMounts {
				dir := strings.TrimSuffix(m.MountPath, "/")
				if (f == dir || strings.HasPrefix(f, dir+"/")) && (best < 0 || len(dir) > len(strings.TrimSuffix(ctr.VolumeMounts[best].MountPath, "/"))) {
					best = i
				}
			}
			if best >= 0 && !slices.ContainsFunc(mounts, func(m corev1.VolumeMount) bool { return m.MountPath == ctr.VolumeMounts[best].MountPath }) {
				m := ctr.VolumeMounts[best]
				m.ReadOnly, m.MountPropagation = true, nil // a token is read, never written or propagated
				mounts = append(mounts, m)
			}
		}
		return env, mounts
	}
	return nil, nil
}
