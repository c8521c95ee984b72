package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PathMutate is where the MutatingWebhookConfiguration sends reviews.
const PathMutate = "/mutate"

// maxReviewBytes bounds a request body; the API server caps objects well
// below this.
const maxReviewBytes = 8 << 20

// Handler answers AdmissionReview (admission.k8s.io/v1) requests.
type Handler struct {
	cfg        Config
	logger     *slog.Logger
	admissions *prometheus.CounterVec
}

// NewHandler validates cfg (after defaults) and returns the handler. reg
// may be nil; otherwise dataccel_webhook_admissions_total{result} is
// registered on it.
func NewHandler(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Handler, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("webhook config: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{cfg: cfg, logger: logger, admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dataccel_webhook_admissions_total",
		Help: "Admission reviews answered, by result (injected, skipped, already_injected, rejected, error).",
	}, []string{"result"})}
	if reg != nil {
		if err := reg.Register(h.admissions); err != nil {
			return nil, fmt.Errorf("register webhook metrics: %w", err)
		}
	}
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		h.fail(w, http.StatusUnsupportedMediaType, errors.New("want Content-Type application/json"))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	if err != nil {
		h.fail(w, http.StatusBadRequest, fmt.Errorf("read body: %w", err))
		return
	}
	if len(body) > maxReviewBytes {
		h.fail(w, http.StatusRequestEntityTooLarge, errors.New("AdmissionReview too large"))
		return
	}
	out, err := h.Review(body)
	if err != nil {
		h.fail(w, http.StatusBadRequest, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

func (h *Handler) fail(w http.ResponseWriter, code int, err error) {
	h.admissions.WithLabelValues(string(Failed)).Inc()
	h.logger.Warn("bad admission request", "err", err)
	http.Error(w, err.Error(), code)
}

// Review answers one encoded AdmissionReview with an encoded
// AdmissionReview. An error means the request was not a readable review
// (the HTTP handler answers 400); a pod the webhook refuses is an answer
// with allowed=false, not an error.
func (h *Handler) Review(body []byte) ([]byte, error) {
	var in admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("decode AdmissionReview: %w", err)
	}
	if in.Request == nil {
		return nil, errors.New("AdmissionReview has no request")
	}
	if in.APIVersion != admissionv1.SchemeGroupVersion.String() || in.Kind != "AdmissionReview" {
		return nil, fmt.Errorf("got %s %s, want admission.k8s.io/v1 AdmissionReview", in.APIVersion, in.Kind)
	}
	resp := h.respond(in.Request)
	h.admissions.WithLabelValues(string(resp.result)).Inc()
	out := admissionv1.AdmissionReview{TypeMeta: in.TypeMeta, Response: &resp.AdmissionResponse}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode AdmissionReview: %w", err)
	}
	return b, nil
}

type response struct {
	admissionv1.AdmissionResponse
	result Result
}

func (h *Handler) respond(req *admissionv1.AdmissionRequest) response {
	allow := response{AdmissionResponse: admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}, result: Skipped}
	podResource := metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
	if req.Resource != podResource || req.SubResource != "" || req.Operation != admissionv1.Create {
		return allow
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return deny(req, Failed, http.StatusBadRequest, fmt.Sprintf("dataccel webhook: cannot decode the pod: %v", err))
	}
	name := pod.Name
	if name == "" {
		name = pod.GenerateName + "*"
	}
	if pod.Namespace == "" { // a pod created in the request's namespace without naming it
		pod.Namespace = req.Namespace
	}
	ops, result, err := h.cfg.Mutate(&pod)
	log := h.logger.With("namespace", req.Namespace, "pod", name, "result", string(result))
	switch result {
	case Rejected:
		log.Info("pod rejected", "reason", err.Error())
		return deny(req, Rejected, http.StatusUnprocessableEntity, "dataccel webhook: "+err.Error())
	case Injected:
		patch, err := json.Marshal(ops)
		if err != nil {
			return deny(req, Failed, http.StatusInternalServerError, fmt.Sprintf("dataccel webhook: encode patch: %v", err))
		}
		pt := admissionv1.PatchTypeJSONPatch
		log.Info("sidecar injected", "bucket", pod.Annotations[AnnotationBucket], "prefix", pod.Annotations[AnnotationPrefix])
		return response{AdmissionResponse: admissionv1.AdmissionResponse{UID: req.UID, Allowed: true, Patch: patch, PatchType: &pt}, result: Injected}
	default:
		log.Debug("pod unchanged")
		allow.result = result
		return allow
	}
}

func deny(req *admissionv1.AdmissionRequest, result Result, code int32, msg string) response {
	return response{AdmissionResponse: admissionv1.AdmissionResponse{
		UID:     req.UID,
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    code,
			Reason:  metav1.StatusReasonInvalid,
			Message: msg,
		},
	}, result: result}
}
