package api

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/xlbproject/xlb/internal/config"
)

// ForwardingOf reads a Service's AnnotationForwarding: the mode it names,
// and whether the Service has the annotation at all. A value that names
// no mode is the error of config.ParseForwarding (a *config.NameError).
// The LB nodes, the backend nodes and the controller all read it here.
func ForwardingOf(svc *corev1.Service) (fwd config.Forwarding, set bool, err error) {
	v, ok := svc.Annotations[AnnotationForwarding]
	if !ok {
		return "", false, nil
	}
	fwd, err = config.ParseForwarding(strings.TrimSpace(v))
	return fwd, true, err
}
