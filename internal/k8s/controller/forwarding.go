package controller

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/k8s/api"
)

// EventInvalidForwarding (Warning, on a Service): its xlb.io/forwarding
// annotation names no forwarding mode, and the load-balancer nodes keep
// forwarding the Service as they did (dsr-ipip where they never served
// it); or it names nat or dnat together with an xlb.io/flows mode, which
// a NAT Service cannot take, and the nodes do not serve it.
const EventInvalidForwarding = "InvalidForwarding"

// forwardingKey is where r.warned remembers a Service's forwarding
// Event, apart from its allocation warnings.
func forwardingKey(key string) string { return "forwarding:" + key }

// noteForwarding records, once per distinct message, a Warning Event on
// a served Service whose forwarding annotations the load-balancer nodes
// cannot follow (internal/k8s/source reads them the same way).
func (r *reconciler) noteForwarding(svc *corev1.Service, key string) {
	wkey := forwardingKey(key)
	msg, fix := forwardingProblem(svc)
	if msg == "" {
		delete(r.warned, wkey)
		return
	}
	r.warn(svc, wkey, EventInvalidForwarding, msg, fix)
}

// forwardingProblem says what is wrong with svc's forwarding annotations
// and what to do; "" when nothing is.
func forwardingProblem(svc *corev1.Service) (msg, fix string) {
	fwd, set, err := api.ForwardingOf(svc)
	if err != nil {
		what := err.Error()
		var ne *config.NameError
		if errors.As(err, &ne) {
			what = fmt.Sprintf("%q is not %s (%s)", ne.Name, ne.What, ne.List())
		}
		return fmt.Sprintf("annotation %s: %s; the xlb nodes keep forwarding the Service as they did (dsr-ipip where they never served it) until it is corrected", api.AnnotationForwarding, what),
			fmt.Sprintf("set the annotation %s to dsr-ipip, dsr-gue, nat or dnat, or remove it for dsr-ipip", api.AnnotationForwarding)
	}
	if !set || !fwd.Translates() {
		return "", ""
	}
	flows, ferr := config.ParseFlows(strings.TrimSpace(svc.Annotations[api.AnnotationFlows]))
	if _, ok := svc.Annotations[api.AnnotationFlows]; !ok || ferr != nil || flows == config.FlowsStateless {
		return "", ""
	}
	return fmt.Sprintf("annotation %s: forwarding %s holds a session per connection on the load-balancer node, which is stateful by nature, and takes no flows mode, but %s says %s; the xlb nodes do not serve the Service until one of the two annotations is changed",
			api.AnnotationForwarding, fwd, api.AnnotationFlows, flows),
		fmt.Sprintf("remove the annotation %s (the session keeps each connection on its pod), or set %s to dsr-ipip or dsr-gue", api.AnnotationFlows, api.AnnotationForwarding)
}
