package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// EventTrafficPolicy (Normal): the Service asks for
// externalTrafficPolicy: Local. xlb delivers every Service the way Local
// delivers elsewhere, so Local changes nothing; the Event says so, and
// what becomes of the healthCheckNodePort, instead of ignoring the field
// in silence (docs/kubernetes.md, "externalTrafficPolicy").
const EventTrafficPolicy = "ExternalTrafficPolicy"

// notePolicy records, once per distinct message, what xlb makes of a
// served Service's externalTrafficPolicy: Local.
func (r *reconciler) notePolicy(svc *corev1.Service, key string) {
	if svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
		delete(r.noted, key)
		return
	}
	msg := "externalTrafficPolicy Local changes nothing with xlb: every Service already gets what Local gives elsewhere. " +
		"The xlb nodes tunnel each connection straight to its pod's node, which hands it to that pod with the client's address " +
		"(direct server return): no second hop, no SNAT. New connections are spread over the ready endpoints on every node, as with Cluster. "
	if p := svc.Spec.HealthCheckNodePort; p != 0 {
		msg += fmt.Sprintf("The healthCheckNodePort %d is not used: the xlb nodes read the endpoints' readiness from the EndpointSlices. "+
			"Set Cluster to free that node port.", p)
	}
	if r.noted[key] == msg {
		return
	}
	r.noted[key] = msg
	r.recorder.Event(svc, corev1.EventTypeNormal, EventTrafficPolicy, msg)
}
