package webhook

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dataccel/dataccel/webhook/jsonpatch"
)

// Result says what the webhook did with one pod.
type Result string

// The possible results; they are also the values of the result label of
// the dataccel_webhook_admissions_total metric.
const (
	Injected        Result = "injected"
	Skipped         Result = "skipped"          // no (or "false") inject annotation, or not a pod CREATE
	AlreadyInjected Result = "already_injected" // the pod has the sidecar: left as is
	Rejected        Result = "rejected"         // bad annotations or a conflicting pod
	Failed          Result = "error"            // the request itself could not be read
)

// Mutate decides what to do with pod and returns the JSON patch that
// injects the sidecar (nil unless the result is Injected). A Rejected
// result comes with an error whose message is meant for the pod's author.
// pod is not modified.
func (c Config) Mutate(pod *corev1.Pod) ([]jsonpatch.Operation, Result, error) {
	ann := pod.Annotations
	switch v, ok := ann[AnnotationInject]; {
	case !ok || v == "false":
		return nil, Skipped, nil
	case v != "true":
		return nil, Rejected, &AnnotationError{AnnotationInject, v, `want "true" or "false"`}
	}
	for _, ic := range pod.Spec.InitContainers {
		if ic.Name != SidecarName {
			continue
		}
		// A native sidecar of that name is ours, or one written by hand.
		// A plain init container would pass for it and leave the pod
		// without its dataset.
		if ic.RestartPolicy != nil && *ic.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			return nil, AlreadyInjected, nil
		}
		return nil, Rejected, fmt.Errorf("init container name %q is reserved for the dataccel sidecar: rename the init container", SidecarName)
	}
	s, err := c.settings(ann)
	if err != nil {
		return nil, Rejected, err
	}
	s.hostNetwork = pod.Spec.HostNetwork
	s.namespace = pod.Namespace
	if s.namespace == "" {
		s.namespace = metav1.NamespaceDefault
	}
	if err := checkConflicts(pod, s); err != nil {
		return nil, Rejected, err
	}
	return c.patch(pod, s), Injected, nil
}

func checkConflicts(pod *corev1.Pod, s settings) error {
	if len(pod.Spec.Containers) == 0 {
		return fmt.Errorf("pod has no containers to give the dataset to")
	}
	for _, ctr := range pod.Spec.Containers {
		if ctr.Name == SidecarName {
			return fmt.Errorf("container name %q is reserved for the dataccel sidecar: rename the container", SidecarName)
		}
		for _, m := range ctr.VolumeMounts {
			if m.MountPath == s.mountPath {
				return fmt.Errorf("container %q already mounts volume %q at %s: choose another path with %s", ctr.Name, m.Name, s.mountPath, AnnotationMountPath)
			}
			// The runtime would make the mount point inside the read-only
			// dataset mount, and fail to start the container.
			if strings.HasPrefix(m.MountPath, strings.TrimSuffix(s.mountPath, "/")+"/") {
				return fmt.Errorf("container %q mounts volume %q at %s, inside the dataset's mount path %s (read-only): choose another path with %s", ctr.Name, m.Name, m.MountPath, s.mountPath, AnnotationMountPath)
			}
		}
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == DataVolumeName || v.Name == CacheVolumeName {
			return fmt.Errorf("volume name %q is reserved for the dataccel sidecar: rename the volume", v.Name)
		}
	}
	return checkHTTPPort(pod, s)
}

// checkHTTPPort refuses a sidecar port that cannot be bound. A hostNetwork
// pod must choose the port itself unless the operator chose one for the
// webhook (--sidecar-http-port): there the port is the node's, and the
// default 9100 is node-exporter's on most clusters (the webhook cannot see
// the node). A refusal at admission that names the annotation beats a
// sidecar that fails to bind and a pod its probes then kill.
func checkHTTPPort(pod *corev1.Pod, s settings) error {
	if s.hostNetwork && !s.httpPortSet && s.httpPort == DefaultHTTPPort {
		return &AnnotationError{AnnotationHTTPPort, "", fmt.Sprintf("required on a hostNetwork pod: the sidecar's /metrics, /healthz and /readyz port is the node's there, and the default %d is often taken (node-exporter): choose a port free on the node", s.httpPort)}
	}
	// The pod's containers share the sidecar's network namespace. Regular
	// init containers have exited by the time the sidecar (the last one)
	// starts; native sidecars (restartPolicy Always) keep running.
	ctrs := append([]corev1.Container{}, pod.Spec.Containers...)
	for _, ic := range pod.Spec.InitContainers {
		if ic.RestartPolicy != nil && *ic.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			ctrs = append(ctrs, ic)
		}
	}
	for _, ctr := range ctrs {
		for _, p := range ctr.Ports {
			// Only TCP binds collide (Protocol "" defaults to TCP).
			if p.ContainerPort == s.httpPort && (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) {
				return fmt.Errorf("container %q declares port %d/TCP, which the dataccel sidecar serves /metrics, /healthz and /readyz on: choose another port with %s", ctr.Name, s.httpPort, AnnotationHTTPPort)
			}
		}
	}
	return nil
}

// patch builds "add" operations only: the webhook never removes or
// replaces what the pod's author wrote.
func (c Config) patch(pod *corev1.Pod, s settings) []jsonpatch.Operation {
	var ops []jsonpatch.Operation
	sidecar := c.sidecar(s)
	if s.podIdentity {
		env, mounts := podIdentity(pod)
		sidecar.Env = append(env, sidecar.Env...)
		sidecar.VolumeMounts = append(sidecar.VolumeMounts, mounts...)
	}
	if len(pod.Spec.InitContainers) == 0 {
		ops = append(ops, jsonpatch.Add("/spec/initContainers", []corev1.Container{sidecar}))
	} else {
		// Last: the pod's own init containers run first, as they did
		// before injection, and the mount is serving when the regular
		// containers start (the startup probe gates them).
		ops = append(ops, jsonpatch.Add("/spec/initContainers/-", sidecar))
	}
	// The node's cache root must exist (the operator makes it on the NVMe
	// disk): created on demand, it would land on the root disk of a node
	// without one, and fill it up to --cache-size.
	hostPathType := corev1.HostPathDirectory
	volumes := []corev1.Volume{
		{Name: DataVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: CacheVolumeName, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: c.CacheHostPath, Type: &hostPathType,
		}}},
	}
	if len(pod.Spec.Volumes) == 0 {
		ops = append(ops, jsonpatch.Add("/spec/volumes", volumes))
	} else {
		for _, v := range volumes {
			ops = append(ops, jsonpatch.Add("/spec/volumes/-", v))
		}
	}
	h2c := corev1.MountPropagationHostToContainer
	mount := corev1.VolumeMount{Name: DataVolumeName, MountPath: s.mountPath, ReadOnly: true, MountPropagation: &h2c}
	for i, ctr := range pod.Spec.Containers {
		p := "/spec/containers/" + strconv.Itoa(i) + "/volumeMounts"
		if len(ctr.VolumeMounts) == 0 {
			ops = append(ops, jsonpatch.Add(p, []corev1.VolumeMount{mount}))
		} else {
			ops = append(ops, jsonpatch.Add(p+"/-", mount))
		}
	}
	// Mutate is only reached with the inject annotation, so the map exists.
	ops = append(ops, jsonpatch.Add("/metadata/annotations/"+jsonpatch.Escape(AnnotationStatus), string(Injected)))
	return ops
}
