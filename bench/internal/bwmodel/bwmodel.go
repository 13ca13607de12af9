// Package bwmodel is the bandwidth model of the dissertation's Appendix C
// ("Analysis of the performance limit"): the most HTTP requests per
// second that the links of a load-balanced path can carry, from the
// bytes each request and its response put on the wire.
//
// The dissertation counted, with tcpdump, the packets of one wrk
// connection of 100 requests (Tables C.1 and C.2) and the bytes each
// costs on Ethernet (Table C.3), and found that a node that both
// receives and sends every request and response over one 1 Gbps port
// can carry at most 1e9/8/(content+665.36) requests per second: the
// ceiling its IPVS and iptables DNAT measurements met. With direct server
// return the responses bypass the node, which then carries only the
// requests (plus the tunnel's bytes), and the ceiling moves to the
// client's link. MaxRate computes every link's ceiling for a path and
// reports the lowest.
package bwmodel

import (
	"fmt"
	"math"
)

// Bytes one Ethernet frame costs on the wire besides its IP packet
// (Table C.3): preamble 8, header 14, FCS 4, inter-frame gap 12.
const EthernetOverhead = 8 + 14 + 4 + 12

// TCP/IP header bytes of a segment (Table C.3): IPv4 20, TCP 20, and the
// options wrk's Linux peers send: 20 on a SYN (MSS, SACK, timestamps,
// window scale), 12 on the others (timestamps and two NOPs).
const (
	SYNHeaders = 20 + 20 + 20
	Headers    = 20 + 20 + 12
)

// Workload is what a benchmark client sends: wrk's connections of
// RequestsPerConn requests each.
type Workload struct {
	RequestsPerConn int // 100 in the dissertation (Table 4.1)
	RequestBytes    int // HTTP request: 44 in the dissertation
	ResponseHead    int // HTTP response status line and headers: 254
	Content         int // HTTP response body
}

// Dissertation is the workload of the dissertation's measurements with
// a body of content bytes.
func Dissertation(content int) Workload {
	return Workload{RequestsPerConn: 100, RequestBytes: 44, ResponseHead: 254, Content: content}
}

// frame is the wire cost of a TCP segment with payload bytes.
func frame(payload, headers int) float64 {
	return float64(payload + headers + EthernetOverhead)
}

// Request is the client→server bytes per request on the wire, the
// connection's handshake and teardown shared out over its requests
// (Table C.1: SYN, an ACK per response and two more, the GET, FIN).
func (w Workload) Request() float64 {
	n := float64(w.RequestsPerConn)
	total := frame(0, SYNHeaders) + (n+2)*frame(0, Headers) + n*frame(w.RequestBytes, Headers) + frame(0, Headers)
	return total / n
}

// Response is the server→client bytes per request (Table C.2: SYN+ACK,
// two ACKs, the response head and body as two segments, FIN). A body
// larger than one segment is not split: the model keeps the
// dissertation's small responses.
func (w Workload) Response() float64 {
	n := float64(w.RequestsPerConn)
	total := frame(0, SYNHeaders) + 2*frame(0, Headers) + n*frame(w.ResponseHead, Headers) + n*frame(w.Content, Headers) + frame(0, Headers)
	return total / n
}

// RequestPackets is the client→server packets per request.
func (w Workload) RequestPackets() float64 {
	n := float64(w.RequestsPerConn)
	return (1 + (n + 2) + n + 1) / n
}

// Path is how a load balancer handles a request and its response.
type Path struct {
	Name string
	// Proxy: the node receives and sends the responses as well as the
	// requests (iptables/nftables DNAT, IPVS-NAT, an L4 proxy).
	Proxy bool
	// TunnelBytes is what the node adds to each packet it sends on to a
	// backend: 20 for IPIP, 32 for GUE, 48 for GUE with xlb's daisy-chain
	// hint, 0 for DNAT or a proxy.
	TunnelBytes int
}

// Paths of xlb and the alternatives the benchmarks compare.
var (
	Direct     = Path{Name: "direct"}
	DNAT       = Path{Name: "dnat", Proxy: true}
	XLBIPIP    = Path{Name: "xlb dsr-ipip", TunnelBytes: 20}
	XLBGUE     = Path{Name: "xlb dsr-gue", TunnelBytes: 32}
	XLBGUEHint = Path{Name: "xlb dsr-gue daisy-chain", TunnelBytes: 48}
)

// Link is one link's ceiling.
type Link struct {
	Name string
	// Rate is the most requests per second its busier direction carries.
	Rate float64
}

// MaxRate returns the ceiling of each link of path for workload w, where
// every link carries bandwidth bits per second in each direction and
// the requests are spread over backends servers, and the lowest of them:
// the model's prediction. Direct has no node link.
func MaxRate(bandwidth float64, w Workload, path Path, backends int) (lowest Link, links []Link, err error) {
	if bandwidth <= 0 || w.RequestsPerConn <= 0 || backends <= 0 || w.RequestBytes < 0 || w.ResponseHead < 0 || w.Content < 0 || path.TunnelBytes < 0 {
		return Link{}, nil, fmt.Errorf("bandwidth model: bandwidth %g, %d requests per connection, %d backends and every size must be positive", bandwidth, w.RequestsPerConn, backends)
	}
	bytesPerSec := bandwidth / 8
	req, resp := w.Request(), w.Response()
	toBackend := req + float64(path.TunnelBytes)*w.RequestPackets()
	add := func(name string, perRequest float64, share float64) {
		links = append(links, Link{Name: name, Rate: share * bytesPerSec / perRequest})
	}
	// The client sends every request and receives every response.
	add("client", math.Max(req, resp), 1)
	n := float64(backends)
	switch {
	case path == Direct:
		add("backends", math.Max(req, resp), n)
	case path.Proxy:
		// Requests and responses in both directions of one port.
		add("node", req+resp, 1)
		add("backends", math.Max(req, resp), n)
	default:
		// The node receives requests and sends them tunnelled; the
		// responses go from the backends straight to the client.
		add("node", math.Max(req, toBackend), 1)
		add("backends", math.Max(toBackend, resp), n)
	}
	lowest = links[0]
	for _, l := range links[1:] {
		if l.Rate < lowest.Rate {
			lowest = l
		}
	}
	return lowest, links, nil
}
