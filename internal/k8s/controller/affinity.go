package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// EventAffinityTimeout (Warning, on a Service): the Service asks for
// sessionAffinity ClientIP, which xlb gives it, with a timeout
// (sessionAffinityConfig.clientIP.timeoutSeconds, which the API server
// fills in when it is left out), which xlb cannot honour.
const EventAffinityTimeout = "AffinityTimeoutUnsupported"

// affinityKey is where r.warned remembers a Service's affinity Event,
// apart from its allocation warnings.
func affinityKey(key string) string { return "affinity:" + key }

// noteAffinity tells a served Service with sessionAffinity ClientIP, once
// per distinct timeout, what xlb makes of it: the affinity, without the
// timeout. The agents give every connection of a client the same
// endpoint by leaving the source port out of the flow hash; with no state
// per client there is nothing that could expire, so a client keeps its
// endpoint for as long as the endpoints stay the same, longer or shorter
// than the timeout.
func (r *reconciler) noteAffinity(svc *corev1.Service, key string) {
	wkey := affinityKey(key)
	if svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		delete(r.warned, wkey)
		return
	}
	timeout := "unset"
	if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		timeout = fmt.Sprintf("%ds", *c.ClientIP.TimeoutSeconds)
	}
	msg := fmt.Sprintf("sessionAffinity ClientIP is served without its timeout (sessionAffinityConfig.clientIP.timeoutSeconds: %s): "+
		"xlb sends every connection of a client to the same endpoint, from every load-balancer node, by leaving the source port out of the flow hash, "+
		"and keeps no state per client that could expire; a client keeps its endpoint for as long as the Service's endpoints stay the same, "+
		"and may move to another when they change, however recently it connected", timeout)
	if r.warned[wkey] == (warning{EventAffinityTimeout, msg}) {
		return
	}
	r.warned[wkey] = warning{EventAffinityTimeout, msg}
	r.log.Info("session affinity without its timeout", "service", key, "timeout", timeout, "reason", EventAffinityTimeout)
	r.recorder.Event(svc, corev1.EventTypeWarning, EventAffinityTimeout, msg)
}
