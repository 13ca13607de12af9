package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// DefaultSecretNamespace is where the Secrets of BGPPeer passwords are
// looked up when neither the peer, the file nor the environment
// (POD_NAMESPACE) names a namespace.
const DefaultSecretNamespace = "xlb-system"

// Kubernetes is the kubernetes section: with it the agent also serves the
// Services of type LoadBalancer that the Kubernetes API assigns to xlb,
// and peers with the BGPPeer objects that select its node. The services
// and peers of the file are kept and merged with those from the cluster.
type Kubernetes struct {
	// Kubeconfig is the path of a kubeconfig file; "" means the
	// in-cluster configuration (the pod's service account).
	Kubeconfig string
	// NodeName is this node's Node object. "" when the file leaves it
	// out: WithDefaults takes NODE_NAME, then the host name.
	NodeName string
	// SecretNamespace holds the Secrets that BGPPeer passwords name
	// without a namespace. "" when the file leaves it out: WithDefaults
	// takes POD_NAMESPACE, then DefaultSecretNamespace.
	SecretNamespace string
	// ServeClassless also serves Services with no loadBalancerClass,
	// besides those of xlb's class.
	ServeClassless bool
}

// WithDefaults returns k with the fields the file left out taken from the
// environment: NodeName from NODE_NAME, then the host name;
// SecretNamespace from POD_NAMESPACE, then DefaultSecretNamespace. A value
// from the environment must pass the same checks as one in the file.
func (k Kubernetes) WithDefaults(getenv func(string) string, hostname func() (string, error)) (Kubernetes, error) {
	if k.NodeName == "" {
		from := "NODE_NAME"
		name := getenv("NODE_NAME")
		if name == "" {
			from = "the host name"
			h, err := hostname()
			if err != nil {
				return k, fmt.Errorf("kubernetes.nodeName: not set, NODE_NAME is empty and the host name is unknown (%v); set kubernetes.nodeName or NODE_NAME (a DaemonSet sets it from spec.nodeName)", err)
			}
			name = h
		}
		if why := checkNodeName(name); why != "" {
			return k, fmt.Errorf("kubernetes.nodeName: taken from %s: %s; set kubernetes.nodeName or NODE_NAME to this node's Node name", from, why)
		}
		k.NodeName = name
	}
	if k.SecretNamespace == "" {
		ns := getenv("POD_NAMESPACE")
		if ns == "" {
			ns = DefaultSecretNamespace
		} else if why := checkNamespace(ns); why != "" {
			return k, fmt.Errorf("kubernetes.secretNamespace: taken from POD_NAMESPACE: %s", why)
		}
		k.SecretNamespace = ns
	}
	return k, nil
}

// checkNodeName applies Kubernetes' rule for Node names: a DNS subdomain,
// dot-separated DNS labels of at most 253 characters in all.
func checkNodeName(s string) string {
	const rule = "a Node name is a DNS subdomain: lower-case letters, digits, '-' and '.', at most 253 characters, each part between dots starting and ending with a letter or digit"
	switch {
	case s == "":
		return "is empty; " + rule
	case len(s) > 253:
		return fmt.Sprintf("%q is %d characters long; %s", s, len(s), rule)
	}
	for _, part := range strings.Split(s, ".") {
		if !isDNSLabel(part) {
			return fmt.Sprintf("%q is not a valid Node name; %s", s, rule)
		}
	}
	return ""
}

func checkNamespace(s string) string {
	const rule = "a namespace is a DNS label: 1 to 63 lower-case letters, digits and '-', starting and ending with a letter or digit"
	if !isDNSLabel(s) {
		return fmt.Sprintf("%q is not a valid namespace; %s", s, rule)
	}
	return ""
}

// isDNSLabel reports whether s is an RFC 1123 label, as Kubernetes names
// namespaces and Services.
func isDNSLabel(s string) bool {
	return s != "" && checkServiceName(s) == ""
}

// KubernetesServiceName is the name of the xlb service for one port of a
// Kubernetes Service: NAMESPACE/NAME:PORT/PROTOCOL, e.g.
// default/web:80/tcp.
func KubernetesServiceName(namespace, name string, port uint16, p Protocol) string {
	return namespace + "/" + name + ":" + strconv.Itoa(int(port)) + "/" + string(p)
}

// KubernetesServiceName6 is the name of the xlb service for one port of
// a dual-stack Service's IPv6 address: KubernetesServiceName's with
// "/ipv6" appended, e.g. default/web:80/tcp/ipv6.
func KubernetesServiceName6(namespace, name string, port uint16, p Protocol) string {
	return KubernetesServiceName(namespace, name, port, p) + "/" + ipv6Suffix
}

const ipv6Suffix = "ipv6"

// checkName accepts a service name: a DNS label, or a name in the form
// KubernetesServiceName gives.
func checkName(s string) string {
	if !strings.Contains(s, "/") {
		return checkServiceName(s)
	}
	if err := parseKubernetesName(s); err != nil {
		return fmt.Sprintf("%q is not a valid name: %v; a name is a DNS label (1 to 63 lower-case letters, digits and '-', starting and ending with a letter or digit), or NAMESPACE/NAME:PORT/PROTOCOL[/ipv6] as the Kubernetes source writes it, e.g. default/web:80/tcp", s, err)
	}
	return ""
}

// parseKubernetesName checks the form NAMESPACE/NAME:PORT/PROTOCOL, or
// NAMESPACE/NAME:PORT/PROTOCOL/ipv6.
func parseKubernetesName(s string) error {
	ns, rest, _ := strings.Cut(s, "/")
	name, rest, ok := strings.Cut(rest, ":")
	if !ok {
		return errors.New("no ':' before the port")
	}
	port, proto, ok := strings.Cut(rest, "/")
	if !ok {
		return errors.New("no '/' before the protocol")
	}
	proto, fam, hasFam := strings.Cut(proto, "/")
	switch {
	case hasFam && fam != ipv6Suffix:
		return fmt.Errorf("%q after the protocol is not %s", fam, ipv6Suffix)
	case !isDNSLabel(ns):
		return fmt.Errorf("namespace %q is not a DNS label", ns)
	case !isDNSLabel(name):
		return fmt.Errorf("the Service name %q is not a DNS label", name)
	}
	if _, err := ParseProtocol(proto); err != nil {
		return fmt.Errorf("protocol %q is not tcp or udp", proto)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 || strconv.FormatUint(n, 10) != port {
		return fmt.Errorf("port %q is not a number in 1..65535", port)
	}
	return nil
}
