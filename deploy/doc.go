// Package deploy holds dataccel's Kubernetes deployment: the Dockerfile,
// the kustomize base (an example training Job with the dataccel native
// sidecar), the bench overlay and the admission webhook's manifests (see
// README.md in this directory).
//
// The Go code here exists for the tests: it embeds the manifests, renders a
// kustomization the way kustomize does for the subset of features these
// manifests use (resources, JSON 6902 patches, images), decodes every object
// strictly into k8s.io/api types, and expands container arguments the way
// the kubelet does. A kustomization field outside that subset is an error,
// not silently ignored. It does not own the sidecar's settings (the webhook
// package does, for injected pods) nor the binary's flags (cmd/dataccel).
package deploy
