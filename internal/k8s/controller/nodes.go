package controller

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/xlbproject/xlb/internal/k8s/api"
)

// EventNodeAddress (Warning, on a Service or an AddressPool): an
// address is a Node's InternalIP or ExternalIP, which no Service may
// have: a VIP equal to a node's address takes that node off the network
// (the xlb nodes would take its BGP, BFD and health-check packets for the
// Service's). On a pool: those addresses are not handed out. On a
// Service: it lost that address, and got another or none.
const EventNodeAddress = "NodeAddressConflict"

// nodeAddressesOnly keeps of a Node what the controller reads, its name
// and addresses: Node objects are large and change often.
func nodeAddressesOnly(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion},
		Status:     corev1.NodeStatus{Addresses: n.Status.Addresses},
	}, nil
}

// watchNodes turns Node changes that touch addresses into work.
func (r *reconciler) watchNodes(nodes cache.SharedIndexInformer) error {
	changed := func(any) { r.queue.Add(item{kind: nodesItem}) }
	_, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: changed,
		UpdateFunc: func(old, obj any) {
			o, ok1 := old.(*corev1.Node)
			n, ok2 := obj.(*corev1.Node)
			if !ok1 || !ok2 || !slices.Equal(o.Status.Addresses, n.Status.Addresses) {
				changed(obj)
			}
		},
		DeleteFunc: changed,
	})
	if err != nil {
		return fmt.Errorf("watch Nodes: %w", err)
	}
	return nil
}

// nodeAddresses lists, by address, the Nodes' InternalIPs and
// ExternalIPs of both families, each list sorted.
func nodeAddresses(nodes []*corev1.Node) map[netip.Addr][]api.NodeAddress {
	out := map[netip.Addr][]api.NodeAddress{}
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			ip, err := netip.ParseAddr(strings.TrimSpace(a.Address))
			if err != nil || ip.Zone() != "" {
				continue
			}
			ip = ip.Unmap()
			na := api.NodeAddress{Address: ip.String(), Node: n.Name, Type: string(a.Type)}
			if !slices.Contains(out[ip], na) {
				out[ip] = append(out[ip], na)
			}
		}
	}
	for _, l := range out {
		slices.SortFunc(l, func(a, b api.NodeAddress) int {
			return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Type, b.Type))
		})
	}
	return out
}

// whose says whose address it is: "the InternalIP of Node lb-1".
func whose(l []api.NodeAddress) string {
	parts := make([]string, len(l))
	for i, a := range l {
		parts[i] = fmt.Sprintf("the %s of Node %s", a.Type, a.Node)
	}
	return strings.Join(parts, " and ")
}

// syncNodes hands the Nodes' addresses to the allocator, which hands
// none of them out, and, if they changed, looks at every pool and
// Service again: a Service may hold an address that just became a
// node's, or wait for one that no longer is.
func (r *reconciler) syncNodes() error {
	nodes, err := r.nodes.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list Nodes: %w", err)
	}
	now := nodeAddresses(nodes)
	if r.nodeAddrs != nil && maps.EqualFunc(now, r.nodeAddrs, slices.Equal) {
		return nil
	}
	r.nodeAddrs = now
	why := make(map[netip.Addr]string, len(now))
	for ip, l := range now {
		why[ip] = whose(l)
	}
	r.alloc.SetReserved(why)
	r.metrics.setPools(r.alloc)
	return r.lookAgain()
}

// lookAgain queues every pool's status and every Service.
func (r *reconciler) lookAgain() error {
	objs, err := r.pools.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list AddressPools: %w", err)
	}
	for _, obj := range objs {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			r.queue.Add(item{kind: poolStatusItem, key: u.GetName()})
		}
	}
	svcs, err := r.services.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list Services: %w", err)
	}
	for _, svc := range svcs {
		r.queue.Add(item{kind: serviceItem, key: svc.Namespace + "/" + svc.Name})
	}
	return nil
}

// poolNodeAddresses are the Node addresses the pool leaves out, for its
// status.
func (r *reconciler) poolNodeAddresses(pool string) []api.NodeAddress {
	var out []api.NodeAddress
	for _, ip := range r.alloc.ReservedIn(pool) {
		out = append(out, r.nodeAddrs[ip]...)
	}
	return out
}

// describeNodeAddresses lists them for an Event, at most maxListed.
func describeNodeAddresses(l []api.NodeAddress) string {
	var parts []string
	for i, a := range l {
		if i == maxListed {
			parts = append(parts, fmt.Sprintf("and %d more (status.nodeAddresses)", len(l)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (the %s of Node %s)", a.Address, a.Type, a.Node))
	}
	return strings.Join(parts, ", ")
}

// maxListed bounds the addresses an Event lists.
const maxListed = 5
