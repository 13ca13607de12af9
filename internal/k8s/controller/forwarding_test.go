package controller

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/testbed/testenv"
)

func annotated(kv ...string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			s.Annotations[kv[i]] = kv[i+1]
		}
	}
}

// A forwarding annotation that names no mode gets a Warning Event saying
// the Service keeps its mode, and a NAT Service with a flows mode one
// saying it is not served; valid annotations get none, and the Service
// gets its address either way. A corrected annotation is reported again
// if it goes bad again.
func TestForwardingEvents(t *testing.T) {
	e := newFakeEnv(t, []runtime.Object{
		lbService("a", "typo", annotated(api.AnnotationForwarding, "natt")),
		lbService("a", "sticky", annotated(api.AnnotationForwarding, "nat", api.AnnotationFlows, "stateful")),
		lbService("a", "nat", annotated(api.AnnotationForwarding, "nat")),
		lbService("a", "dnat", annotated(api.AnnotationForwarding, "dnat", api.AnnotationFlows, "stateless")),
	}, poolObject("p", map[string]any{"addresses": []any{"10.99.0.0/29"}}))
	e.start(Options{Metrics: newMetrics(t)})

	ev := e.waitEvent("a/typo", EventInvalidForwarding, `annotation xlb.io/forwarding: "natt" is not a forwarding mode (dsr-ipip, dsr-gue, nat or dnat)`,
		"the xlb nodes keep forwarding the Service as they did (dsr-ipip where they never served it) until it is corrected")
	if ev.typ != corev1.EventTypeWarning {
		t.Errorf("%v: want a Warning", ev)
	}
	e.waitEvent("a/sticky", EventInvalidForwarding, "forwarding nat holds a session per connection on the load-balancer node", "xlb.io/flows says stateful",
		"the xlb nodes do not serve the Service")
	for _, name := range []string{"typo", "sticky", "nat", "dnat"} {
		testenv.Eventually(t, 10*time.Second, "an address for "+name, func() (bool, string) {
			got := ingressOf(e.svc("a", name))
			return got != "", got
		})
	}
	for _, name := range []string{"a/nat", "a/dnat"} {
		if evs := e.events.find(name, EventInvalidForwarding); len(evs) != 0 {
			t.Errorf("%s: %v, want no %s Event", name, evs, EventInvalidForwarding)
		}
	}

	// Another bad value: another Event.
	s := e.svc("a", "typo")
	s.Annotations[api.AnnotationForwarding] = "snat"
	e.update(s)
	e.waitEvent("a/typo", EventInvalidForwarding, `"snat" is not a forwarding mode`)
	if evs := e.events.find("a/typo", EventInvalidForwarding); len(evs) != 2 || !strings.Contains(evs[0].msg, `"natt"`) {
		t.Errorf("typo's Events %v, want one for natt, one for snat", evs)
	}
}

// A Warning is recorded once per distinct message, forgotten when the
// annotation is corrected, and recorded again when it goes bad again.
func TestNoteForwardingOnce(t *testing.T) {
	rec := &recorder{}
	r := &reconciler{warned: map[string]warning{}, recorder: rec, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	svc := lbService("a", "web", annotated(api.AnnotationForwarding, "natt"))
	r.noteForwarding(svc, "a/web")
	r.noteForwarding(svc, "a/web")
	if n := len(rec.find("a/web", EventInvalidForwarding)); n != 1 {
		t.Fatalf("the same bad value twice: %d Events, want 1", n)
	}
	r.noteForwarding(lbService("a", "web", annotated(api.AnnotationForwarding, "dnat")), "a/web")
	r.noteForwarding(svc, "a/web")
	if n := len(rec.find("a/web", EventInvalidForwarding)); n != 2 {
		t.Errorf("bad, corrected, bad again: %d Events, want 2", n)
	}
}

// A communities annotation the agents cannot read gets a Warning Event
// saying the Service's routes carry the advertisements' communities
// alone; a valid one gets none.
func TestCommunitiesEvents(t *testing.T) {
	e := newFakeEnv(t, []runtime.Object{
		lbService("a", "typo", annotated(api.AnnotationBGPCommunities, "65000:100, 65000;7")),
		lbService("a", "good", annotated(api.AnnotationBGPCommunities, "65000:100, no-export, 1:2:3")),
	}, poolObject("p", map[string]any{"addresses": []any{"10.99.0.0/29"}}))
	e.start(Options{Metrics: newMetrics(t)})
	ev := e.waitEvent("a/typo", EventInvalidBGPCommunities, "annotation xlb.io/bgp-communities: ", "65000;7",
		"the xlb nodes announce the Service's routes with the BGPAdvertisements' communities alone until it is corrected")
	if ev.typ != corev1.EventTypeWarning {
		t.Errorf("%v: want a Warning", ev)
	}
	testenv.Eventually(t, 10*time.Second, "an address for good", func() (bool, string) {
		got := ingressOf(e.svc("a", "good"))
		return got != "", got
	})
	if evs := e.events.find("a/good", EventInvalidBGPCommunities); len(evs) != 0 {
		t.Errorf("a/good: %v, want no %s Event", evs, EventInvalidBGPCommunities)
	}
}
