package source

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/internal/k8s/endpoints"
	"github.com/xlbproject/xlb/internal/k8s/history"
)

// cluster is what one translation reads: the informers' caches, or fakes.
type cluster struct {
	services []*corev1.Service
	// slices returns the EndpointSlices of a Service.
	slices func(namespace, name string) []*discoveryv1.EndpointSlice
	node   *corev1.Node // nil when this node's Node object does not exist
	peers  []*unstructured.Unstructured
	// adverts are the BGPAdvertisements; pools the AddressPools they
	// select by label.
	adverts, pools []*unstructured.Unstructured
	// denyLists are the DenyLists, every node's.
	denyLists []*unstructured.Unstructured
	// l2Pools are the names of the AddressPools with announce: l2.
	l2Pools map[string]bool
	// secret returns a Secret; known is false while the cache of its
	// namespace has not synced, so that a missing Secret is not reported
	// before it could have been seen.
	secret func(namespace, name string) (s *corev1.Secret, known bool)
}

// settings are the fixed inputs of every translation.
type settings struct {
	base            *config.Config
	serveClassless  bool
	secretNamespace string
}

// problem is something in the cluster that xlb leaves out of the
// configuration, with the object it concerns ("Service default/web").
type problem struct {
	object, msg string
	fix         string // what to do about it, for the log
}

func (p problem) String() string { return p.object + ": " + p.msg }

// desired is the configuration the cluster asks for, before validation.
type desired struct {
	cfg *config.Config
	// serviceFrom and peerFrom name the object behind each service and
	// peer that came from the cluster, in order after the base's.
	serviceFrom, peerFrom []string
	// secrets are the Secrets the BGPPeers name ("namespace/name"):
	// the Secrets watched.
	secrets map[string]bool
	// ann is what the BGPAdvertisements ask beyond each service's
	// attributes; nil: every VIP to every peer.
	ann *config.Announcements
}

// peerHoldTime is a BGPPeer's hold time when neither it nor the
// base's bgp section sets one, as the BGPPeer API documents.
const peerHoldTime = 90 * time.Second

// passwordKey is the key of a Secret that holds a BGP password.
const passwordKey = "password"

// translate builds the configuration the cluster asks for: the base with
// the served Services' ports and the BGPPeers that select this node added.
// The result is not validated yet (validate does that).
func translate(st settings, c cluster) (desired, []problem) {
	var t translated
	return t.translate(st, c)
}

// translated keeps each Service's translation from one build to the
// next. Informer objects are never changed in place (an update brings a
// new object), so a Service whose object and EndpointSlices are the very
// ones of the last build translates as it did then: a change of one
// Service among a thousand translates one (BenchmarkTranslate).
type translated struct {
	last map[string]translation // by namespace/name
	// denied is the last build's deny list (denyLists).
	denied *denied
}

// translation is one Service's part of a build, and what it came from.
type translation struct {
	svc    *corev1.Service
	slices []*discoveryv1.EndpointSlice
	out    []config.Service
	probs  []problem
}

// same reports whether t came from exactly these objects.
func (t translation) same(svc *corev1.Service, eps []*discoveryv1.EndpointSlice) bool {
	if t.svc != svc || len(t.slices) != len(eps) {
		return false
	}
	for _, e := range eps { // the indexer lists them in no fixed order
		if !slices.Contains(t.slices, e) {
			return false
		}
	}
	return true
}

// translate is translate, reusing the translations of the Services that
// are as they were at t's last build.
func (t *translated) translate(st settings, c cluster) (desired, []problem) {
	cfg := *st.base
	cfg.Services = slices.Clone(st.base.Services)
	d := desired{cfg: &cfg, secrets: map[string]bool{}}
	var probs []problem

	svcs, from, p := t.services(st, c)
	probs = append(probs, p...)
	cfg.Services = append(cfg.Services, svcs...)
	d.serviceFrom = from

	peerProbs := peers(st, c, &d)
	probs = append(probs, peerProbs...)
	probs = append(probs, t.denyLists(st, c, &d)...)
	probs = append(probs, advertise(c, &d, len(st.base.Services))...)
	return d, probs
}

// served reports whether xlb serves svc: type LoadBalancer, of xlb's
// class, or of none when classless ones are served too.
func served(svc *corev1.Service, classless bool) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	if c := svc.Spec.LoadBalancerClass; c != nil {
		return *c == api.LoadBalancerClass
	}
	return classless
}

// ingressIPs returns the first IPv4 and the first IPv6 address of the
// Service's status.loadBalancer.ingress, which the controller writes
// (a dual-stack Service has one of each); invalid where there is none.
func ingressIPs(svc *corev1.Service) (v4, v6 netip.Addr) {
	for _, in := range svc.Status.LoadBalancer.Ingress {
		a, err := netip.ParseAddr(in.IP)
		switch {
		case err != nil || a.Zone() != "" || a.Is4In6():
		case a.Is4() && !v4.IsValid():
			v4 = a
		case a.Is6() && !v6.IsValid():
			v6 = a
		}
	}
	return v4, v6
}

// services translates every port of every served Service that has an
// address and ready or draining endpoints. The oldest Service comes first:
// if two claim the same VIP, port and protocol, validation keeps the older.
func (t *translated) services(st settings, c cluster) ([]config.Service, []string, []problem) {
	svcs := slices.Clone(c.services)
	slices.SortFunc(svcs, func(a, b *corev1.Service) int {
		return cmp.Or(a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	var out []config.Service
	var from []string
	var probs []problem
	next := make(map[string]translation, len(svcs))
	for _, svc := range svcs {
		if !served(svc, st.serveClassless) {
			continue
		}
		eps := c.slices(svc.Namespace, svc.Name)
		key := svc.Namespace + "/" + svc.Name
		tr, ok := t.last[key]
		if !ok || !tr.same(svc, eps) {
			// A forwarding annotation that names no mode leaves the
			// Service as it was forwarded (prev), or dsr-ipip.
			prev := config.Forwarding("")
			if len(tr.out) > 0 {
				prev = tr.out[0].Forwarding
			}
			tr = translation{svc: svc, slices: eps}
			tr.out, tr.probs = translateService(svc, eps, prev)
		}
		next[key] = tr
		if c.l2Pools[svc.Annotations[api.AnnotationAllocatedFrom]] {
			out = append(out, announceL2(tr.out)...)
		} else {
			out = append(out, tr.out...)
		}
		for range tr.out {
			from = append(from, "Service "+key)
		}
		probs = append(probs, tr.probs...)
	}
	t.last = next
	return out, from, probs
}

// badAnnotation is the problem of an annotation whose value v is no name
// its Parse function (which returned err) knows; without the annotation
// the Service would get def.
func badAnnotation[T ~string](obj, annotation, v string, err error, def T) problem {
	var ne *config.NameError
	if !errors.As(err, &ne) {
		return problem{obj, fmt.Sprintf("annotation %s: %v; the Service is not served until it is corrected", annotation, err),
			fmt.Sprintf("correct the annotation %s, or remove it for %s", annotation, def)}
	}
	return problem{obj, fmt.Sprintf("annotation %s: %q is not %s (%s); the Service is not served until it is corrected", annotation, v, ne.What, ne.List()),
		fmt.Sprintf("set the annotation %s to %s, or remove it for %s", annotation, ne.List(), def)}
}

// badForwarding is the problem of a forwarding annotation whose value v
// names no mode (err); the Service keeps fwd, which it had (kept) or
// which is the default.
func badForwarding(obj, v string, err error, fwd config.Forwarding, kept bool) problem {
	what := fmt.Sprintf("annotation %s: %v", api.AnnotationForwarding, err)
	var ne *config.NameError
	if errors.As(err, &ne) {
		what = fmt.Sprintf("annotation %s: %q is not %s (%s)", api.AnnotationForwarding, v, ne.What, ne.List())
	}
	if kept {
		what += fmt.Sprintf("; the Service keeps forwarding %s, as before, until it is corrected", fwd)
	} else {
		what += fmt.Sprintf("; the Service is forwarded %s, the default, until it is corrected", fwd)
	}
	return problem{obj, what, fmt.Sprintf("set the annotation %s to dsr-ipip, dsr-gue, nat or dnat, or remove it for dsr-ipip", api.AnnotationForwarding)}
}

// translateService translates the ports of one served Service with
// endpoints eps: what it returns depends on these two alone, and on
// prev, the forwarding mode its last translation had ("": none), which
// a forwarding annotation that names no mode keeps.
func translateService(svc *corev1.Service, eps []*discoveryv1.EndpointSlice, prev config.Forwarding) ([]config.Service, []problem) {
	var probs []problem
	vip4, vip6 := ingressIPs(svc)
	if !vip4.IsValid() && !vip6.IsValid() {
		// The controller has not assigned an address yet.
		return nil, nil
	}
	obj := "Service " + svc.Namespace + "/" + svc.Name
	fwd, fwdSet, err := api.ForwardingOf(svc)
	switch {
	case err != nil:
		// Not served at all would break its connections for a typo;
		// the controller's Warning Event says the same.
		fwd, fwdSet = cmp.Or(prev, config.DSRIPIP), false
		probs = append(probs, badForwarding(obj, svc.Annotations[api.AnnotationForwarding], err, fwd, prev != ""))
	case !fwdSet:
		fwd = config.DSRIPIP
	}
	var flows config.Flows
	if v, ok := svc.Annotations[api.AnnotationFlows]; ok {
		switch f, err := config.ParseFlows(strings.TrimSpace(v)); {
		case err != nil:
			return nil, append(probs, badAnnotation(obj, api.AnnotationFlows, v, err, config.FlowsStateless))
		case f == config.FlowsDaisyChain:
			// The hint travels in the GUE header: daisy chaining
			// brings dsr-gue with it, and refuses dsr-ipip.
			if fwdSet && fwd != config.DSRGUE {
				probs = append(probs, problem{obj, fmt.Sprintf("annotation %s: daisy-chain needs forwarding dsr-gue (the hint travels in the GUE header), but %s says %s; the Service is not served until it is corrected", api.AnnotationFlows, api.AnnotationForwarding, fwd),
					fmt.Sprintf("remove the annotation %s (daisy-chain implies dsr-gue) or set it to dsr-gue", api.AnnotationForwarding)})
				return nil, probs
			}
			flows, fwd = f, config.DSRGUE
		case f == config.FlowsStateful && fwd.Translates():
			// NAT holds a session per connection on the node.
			return nil, append(probs, problem{obj, fmt.Sprintf("annotation %s: forwarding %s holds a session per connection on the load-balancer node, which is stateful by nature, and takes no flows mode, but %s says %s; the Service is not served until it is corrected", api.AnnotationFlows, fwd, api.AnnotationFlows, f),
				fmt.Sprintf("remove the annotation %s (the session keeps each connection on its pod), or set %s to dsr-ipip or dsr-gue", api.AnnotationFlows, api.AnnotationForwarding)})
		case f != config.FlowsStateless:
			flows = f
		}
	}
	// ClientIP affinity needs no state: the flow hash leaves out the
	// source port. Its timeout cannot be honoured without per-client
	// state; the controller says so in an Event on the Service.
	var affinity config.Affinity
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		affinity = config.AffinityClientIP
	}
	// The endpoint history the leader controller writes: without it
	// (not written yet, or unreadable), each agent records its own.
	var hist history.History
	if v, ok := svc.Annotations[api.AnnotationEndpointHistory]; ok && flows == config.FlowsDaisyChain {
		h, err := history.Parse(v)
		if err != nil {
			probs = append(probs, problem{obj, fmt.Sprintf("annotation %s: %v; the Service is served with the history each agent records itself, which one started later lacks", api.AnnotationEndpointHistory, err),
				fmt.Sprintf("the leader controller writes %s: remove it, and the controller writes it anew at the next change of the endpoints", api.AnnotationEndpointHistory)})
		} else {
			hist = h
		}
	}
	common := config.Service{Forwarding: fwd, Flows: flows, Affinity: affinity,
		// The pods' nodes translate VIP:port to the pods for DSR;
		// with NAT the load-balancer node does.
		TranslatePorts: !fwd.Translates()}
	var out []config.Service
	if vip4.IsValid() {
		s, p := servicePorts(svc, eps, obj, vip4, vip6.IsValid(), common, hist)
		out, probs = append(out, s...), append(probs, p...)
	}
	if vip6.IsValid() {
		s, p := servicePorts(svc, eps, obj, vip6, vip4.IsValid(), common, hist)
		out, probs = append(out, s...), append(probs, p...)
	}
	return out, probs
}

// servicePorts translates the ports of svc at its address vip, of one
// family, with the endpoints of that family: an IPv6 VIP gets the IPv6
// endpoints. dual: the Service has an address of the other family too.
// common holds what every port shares; problems name obj.
func servicePorts(svc *corev1.Service, eps []*discoveryv1.EndpointSlice, obj string, vip netip.Addr, dual bool, common config.Service, hist history.History) ([]config.Service, []problem) {
	v6 := vip.Is6()
	ranges, why := sourceRanges(svc, v6)
	if why != "" {
		what := "the Service is"
		if dual {
			what = fmt.Sprintf("the Service's address %s is", vip)
		}
		return nil, []problem{{obj, why + "; " + what + " not served until this is corrected: no source its ranges leave out may reach it",
			"correct spec.loadBalancerSourceRanges (or the annotation " + api.AnnotationSourceRanges + " it replaces): at most " + fmt.Sprint(config.MaxSourceRanges) + " CIDRs of each family such as 192.0.2.0/24 or 2001:db8::/32"}}
	}
	family, name := discoveryv1.AddressTypeIPv4, config.KubernetesServiceName
	if v6 {
		family, name = discoveryv1.AddressTypeIPv6, config.KubernetesServiceName6
	}
	var out []config.Service
	var probs []problem
	for _, port := range svc.Spec.Ports {
		proto, ok := endpoints.Protocol(port.Protocol)
		if !ok {
			if !v6 { // said once, for the Service
				probs = append(probs, problem{obj, fmt.Sprintf("port %d/%s: xlb balances TCP and UDP only; this port is not served", port.Port, port.Protocol),
					"serve this port by other means, or remove it from the Service; its TCP and UDP ports are served"})
			}
			continue
		}
		if port.Port < 1 || port.Port > 65535 {
			continue // the API server never accepts such a port
		}
		// Every node's endpoints, whatever spec.externalTrafficPolicy
		// says: each pod's own node delivers to it with the client's
		// address, which is what Local asks for elsewhere (the
		// controller says so in an Event; docs/kubernetes.md).
		backends := endpoints.BackendsOf(eps, port, family)
		if len(backends) == 0 {
			// Nothing to send to: left out, so its route is
			// withdrawn, as for a file service whose backends are
			// all down.
			continue
		}
		s := common
		s.Name = name(svc.Namespace, svc.Name, uint16(port.Port), proto)
		s.VIP, s.Port, s.Protocol = vip, uint16(port.Port), proto
		s.SourceRanges, s.Backends = ranges, backends
		// The controller's endpoint history of this address's family.
		key := history.PortKey(uint16(port.Port), proto)
		if v6 {
			key = history.PortKey6(uint16(port.Port), proto)
		}
		s.History = hist.Generations(key)
		out = append(out, s)
	}
	return out, probs
}

// sourceRanges are the sources of one family (v6: IPv6) that may reach
// svc's address of that family (nil: every source), or why xlb cannot
// serve it (api.Ranges.UnservableFor).
func sourceRanges(svc *corev1.Service, v6 bool) ([]netip.Prefix, string) {
	r := api.SourceRanges(svc)
	if why := r.UnservableFor(v6, config.MaxSourceRanges); why != "" {
		return nil, why
	}
	return r.Of(v6), ""
}

// announceL2 is svcs, answered by ARP from one elected node (a Service
// of an AddressPool with announce: l2). The translations are kept for
// the next build, so they are copied, not changed.
func announceL2(svcs []config.Service) []config.Service {
	out := slices.Clone(svcs)
	for i := range out {
		out[i].Announce = config.AnnounceL2
	}
	return out
}
