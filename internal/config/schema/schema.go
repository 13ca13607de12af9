// Package schema is the shape of xlb's configuration file: one Go struct
// per mapping, whose yaml tags name the fields in the order the
// documentation lists them. Decode reads a file into these structs and
// reports what is wrong with its shape (unknown fields, values of the
// wrong kind, bad YAML); every value keeps the line it was written on.
// What the values mean (ranges, addresses, defaults, rules between
// fields) is package config's: config.Validate checks a Document,
// whether decoded from a file or built in code (config.Render, the lab's
// configuration writer), and a Document marshals back to a file.
package schema

import (
	"strconv"
	"time"
)

// Pos is where a value was written. Lines are 1-based; 0 in a Document
// built in code.
type Pos struct {
	Key   Line // the field's key (for a list item: the item)
	Value Line // the value as written: for an alias, where the alias is
	Node  Line // the value itself: for an alias, the node it names
}

// Line is a line number. A file Decode reads holds far fewer than 2^31.
type Line = int32

// Field is one field of a mapping, or one item of a list.
type Field[T any] struct {
	V T
	// Given: the field is written. Otherwise V is zero and the field's
	// default applies.
	Given bool
	// Bad: the field is written with a value Decode rejected (and
	// reported); V is zero.
	Bad bool
	// Flawed: Decode reported a problem inside the value (an unknown
	// field of a mapping, a bad list item), or the value is Bad.
	Flawed bool
	At     Pos
}

// Set returns a field written with value v, for a Document built in code.
func Set[T any](v T) Field[T] { return Field[T]{V: v, Given: true} }

// IsZero leaves a field that is not given out of a marshalled document.
func (f Field[T]) IsZero() bool { return !f.Given }

// MarshalYAML writes the value.
func (f Field[T]) MarshalYAML() (any, error) { return f.V, nil }

// Text is the text of any scalar: an address is read as text, so that
// the check of its content can say more than "expected a string" (10.0
// is a YAML number, and not an IPv4 address).
type Text string

// Int is a whole number. Big holds the text of one that does not fit an
// int64: always out of range.
type Int struct {
	N   int64
	Big string
}

// SetInt returns a field written with the whole number n.
func SetInt[N ~int | ~int64 | ~uint8 | ~uint16 | ~uint32](n N) Field[Int] {
	return Set(Int{N: int64(n)})
}

func (n Int) MarshalYAML() (any, error) {
	if n.Big != "" {
		return n.Big, nil
	}
	return n.N, nil
}

// ASN is an AS number: a whole number, never written in asdot notation.
type ASN Int

func (n ASN) MarshalYAML() (any, error) { return Int(n).MarshalYAML() }

// SetASN returns a field written with the AS number n.
func SetASN(n uint32) Field[ASN] { return Set(ASN{N: int64(n)}) }

// Duration is a Go duration string such as 500ms or 2s, or a bare 0.
type Duration struct {
	D time.Duration
	// Text is the value as written; "" in a Document built in code.
	Text string
}

// SetDuration returns a field written with the duration d.
func SetDuration(d time.Duration) Field[Duration] { return Set(Duration{D: d}) }

// String is the duration as written, or in Go's notation.
func (d Duration) String() string {
	if d.Text != "" {
		return d.Text
	}
	return d.D.String()
}

func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// Status is an HTTP status code (200) or a range of them as text
// ("200-399").
type Status struct {
	IsCode bool
	Code   Int    // when IsCode
	Text   string // otherwise
}

func (s Status) MarshalYAML() (any, error) {
	if s.IsCode {
		return s.Code.MarshalYAML()
	}
	return s.Text, nil
}

// Document is a configuration file.
type Document struct {
	Node       Field[Node]             `yaml:"node,omitempty"`
	API        Field[API]              `yaml:"api,omitempty"`
	Dataplane  Field[Dataplane]        `yaml:"dataplane,omitempty"`
	BGP        Field[BGP]              `yaml:"bgp,omitempty"`
	L2         Field[L2]               `yaml:"l2,omitempty"`
	Policy     Field[Policy]           `yaml:"policy,omitempty"`
	NAT        Field[NAT]              `yaml:"nat,omitempty"`
	Services   Field[[]Field[Service]] `yaml:"services,omitempty"`
	Kubernetes Field[Kubernetes]       `yaml:"kubernetes,omitempty"`

	// At is where the top mapping is.
	At Pos `yaml:"-"`
	// Misspelt holds the paths of the known fields that Decode offered
	// for a misspelt one ("did you mean"): one error says it all, so
	// their absence is not reported again.
	Misspelt map[string]bool `yaml:"-"`
}

// Node is the node section.
type Node struct {
	Interface Field[string] `yaml:"interface,omitempty"`
	Address   Field[Text]   `yaml:"address,omitempty"`
	Address6  Field[Text]   `yaml:"address6,omitempty"`
	Announce  Field[string] `yaml:"announce,omitempty"`
}

// API is the api section.
type API struct {
	Socket  Field[string] `yaml:"socket,omitempty"`
	Metrics Field[Text]   `yaml:"metrics,omitempty"`
}

// Dataplane is the dataplane section.
type Dataplane struct {
	PinPath       Field[string] `yaml:"pinPath,omitempty"`
	AttachMode    Field[string] `yaml:"attachMode,omitempty"`
	TableSize     Field[Int]    `yaml:"tableSize,omitempty"`
	MaxBackends   Field[Int]    `yaml:"maxBackends,omitempty"`
	ConntrackSize Field[Int]    `yaml:"conntrackSize,omitempty"`
	FlowHash      Field[string] `yaml:"flowHash,omitempty"`
	PingVIPs      Field[bool]   `yaml:"pingVIPs,omitempty"`
}

// BGP is the bgp section.
type BGP struct {
	ASN        Field[ASN]           `yaml:"asn,omitempty"`
	RouterID   Field[Text]          `yaml:"routerID,omitempty"`
	HoldTime   Field[Duration]      `yaml:"holdTime,omitempty"`
	Keepalive  Field[Duration]      `yaml:"keepalive,omitempty"`
	DrainTime  Field[Duration]      `yaml:"drainTime,omitempty"`
	ListenPort Field[Int]           `yaml:"listenPort,omitempty"`
	Peers      Field[[]Field[Peer]] `yaml:"peers,omitempty"`
}

func (BGP) expected() (string, bool) { return "expected a mapping with asn and peers, got %s", true }

// Peer is one item of bgp.peers.
type Peer struct {
	Address     Field[Text]     `yaml:"address,omitempty"`
	ASN         Field[ASN]      `yaml:"asn,omitempty"`
	Port        Field[Int]      `yaml:"port,omitempty"`
	Password    Field[string]   `yaml:"password,omitempty"`
	HoldTime    Field[Duration] `yaml:"holdTime,omitempty"`
	Keepalive   Field[Duration] `yaml:"keepalive,omitempty"`
	Multihop    Field[Int]      `yaml:"multihop,omitempty"`
	Passive     Field[bool]     `yaml:"passive,omitempty"`
	MaxPrefixes Field[Int]      `yaml:"maxPrefixes,omitempty"`
	BFD         Field[BFD]      `yaml:"bfd,omitempty"`
	// GracefulRestart is RFC 4724's capability.
	GracefulRestart Field[GracefulRestart] `yaml:"gracefulRestart,omitempty"`
}

func (Peer) expected() (string, bool) {
	return "expected a peer (a mapping with address and asn), got %s", false
}

// BFD is a peer's bfd field.
type BFD struct {
	MinRx      Field[Duration] `yaml:"minRx,omitempty"`
	MinTx      Field[Duration] `yaml:"minTx,omitempty"`
	Multiplier Field[Int]      `yaml:"multiplier,omitempty"`
}

func (BFD) expected() (string, bool) {
	return "expected a mapping such as {minRx: 300ms, minTx: 300ms, multiplier: 3}, got %s; write bfd: {} for the defaults, or remove bfd to go without", true
}

// GracefulRestart is a peer's gracefulRestart field.
type GracefulRestart struct {
	RestartTime Field[Duration] `yaml:"restartTime,omitempty"`
}

func (GracefulRestart) expected() (string, bool) {
	return "expected a mapping such as {restartTime: 120s}, got %s; write gracefulRestart: {} for the default restart time, or remove gracefulRestart to go without", true
}

// L2 is the l2 section: the nodes that elect, among themselves, the one
// answering ARP for each VIP (node.announce: l2).
type L2 struct {
	NodeName  Field[string]          `yaml:"nodeName,omitempty"`
	Port      Field[Int]             `yaml:"port,omitempty"`
	Heartbeat Field[Duration]        `yaml:"heartbeat,omitempty"`
	DeadAfter Field[Duration]        `yaml:"deadAfter,omitempty"`
	Nodes     Field[[]Field[L2Node]] `yaml:"nodes,omitempty"`
}

func (L2) expected() (string, bool) {
	return "expected a mapping with nodes, such as {nodes: [{name: a, address: 10.0.1.2}]}, got %s", true
}

// L2Node is one item of l2.nodes.
type L2Node struct {
	Name    Field[string] `yaml:"name,omitempty"`
	Address Field[Text]   `yaml:"address,omitempty"`
}

func (L2Node) expected() (string, bool) {
	return "expected a node (a mapping with name and address), got %s", false
}

// Policy is the policy section: who may reach the node's VIPs.
type Policy struct {
	Deny Field[[]Field[Text]] `yaml:"deny,omitempty"`
}

func (Policy) expected() (string, bool) {
	return "expected a mapping such as {deny: [192.0.2.0/24]}, got %s", true
}

// NAT is the nat section: the node's settings for services with
// forwarding nat or dnat.
type NAT struct {
	Address  Field[Text]        `yaml:"address,omitempty"`
	Ports    Field[Text]        `yaml:"ports,omitempty"`
	Sessions Field[Int]         `yaml:"sessions,omitempty"`
	Timeouts Field[NATTimeouts] `yaml:"timeouts,omitempty"`
}

func (NAT) expected() (string, bool) {
	return "expected a mapping such as {address: 10.0.1.2, ports: 20000-32767, sessions: 262144}, got %s", true
}

// NATTimeouts is the nat section's timeouts field.
type NATTimeouts struct {
	TCPSyn         Field[Duration] `yaml:"tcpSyn,omitempty"`
	TCPEstablished Field[Duration] `yaml:"tcpEstablished,omitempty"`
	TCPClosing     Field[Duration] `yaml:"tcpClosing,omitempty"`
	UDP            Field[Duration] `yaml:"udp,omitempty"`
	TCPTimeWait    Field[Duration] `yaml:"tcpTimeWait,omitempty"`
}

func (NATTimeouts) expected() (string, bool) {
	return "expected a mapping such as {tcpSyn: 5s, tcpEstablished: 1h, tcpClosing: 10s, udp: 60s, tcpTimeWait: 60s}, got %s", true
}

// Service is one item of services.
type Service struct {
	Name           Field[string]              `yaml:"name,omitempty"`
	VIP            Field[Text]                `yaml:"vip,omitempty"`
	Port           Field[Int]                 `yaml:"port,omitempty"`
	Protocol       Field[string]              `yaml:"protocol,omitempty"`
	SourceRanges   Field[[]Field[Text]]       `yaml:"sourceRanges,omitempty,flow"`
	Forwarding     Field[string]              `yaml:"forwarding,omitempty"`
	TranslatePorts Field[bool]                `yaml:"translatePorts,omitempty"`
	Flows          Field[string]              `yaml:"flows,omitempty"`
	Affinity       Field[string]              `yaml:"affinity,omitempty"`
	Announce       Field[string]              `yaml:"announce,omitempty"`
	History        Field[[]Field[Generation]] `yaml:"history,omitempty"`
	HealthCheck    Field[*Check]              `yaml:"healthCheck,omitempty"`
	BGP            Field[Route]               `yaml:"bgp,omitempty"`
	Backends       Field[[]Field[Backend]]    `yaml:"backends,omitempty"`
}

func (Service) expected() (string, bool) {
	return "expected a service (a mapping with name, vip, port and backends), got %s", false
}

// Generation is one item of a service's history.
type Generation struct {
	Until    Field[Text]             `yaml:"until,omitempty"`
	Backends Field[[]Field[Backend]] `yaml:"backends,omitempty"`
}

// Backend is one item of a service's backends. Its health check is
// written on its line, so that services with thousands of backends stay
// readable; it is held by pointer, so that those without one stay small.
type Backend struct {
	Address     Field[Text]   `yaml:"address,omitempty"`
	Port        Field[Int]    `yaml:"port,omitempty"`
	Weight      Field[Int]    `yaml:"weight,omitempty"`
	HealthCheck Field[*Check] `yaml:"healthCheck,omitempty,flow"`
}

func (Backend) expected() (string, bool) {
	return "expected a backend (a mapping with address and optionally port, weight and healthCheck), got %s", false
}

// Check is a healthCheck field, a service's or a backend's.
type Check struct {
	Type         Field[string]   `yaml:"type,omitempty"`
	Port         Field[Int]      `yaml:"port,omitempty"`
	Path         Field[string]   `yaml:"path,omitempty"`
	ExpectStatus Field[Status]   `yaml:"expectStatus,omitempty"`
	Interval     Field[Duration] `yaml:"interval,omitempty"`
	Timeout      Field[Duration] `yaml:"timeout,omitempty"`
	Rise         Field[Int]      `yaml:"rise,omitempty"`
	Fall         Field[Int]      `yaml:"fall,omitempty"`
}

func (Check) expected() (string, bool) {
	return "expected a mapping such as {type: http, path: /, interval: 1s}, got %s", true
}

// Route is a service's bgp field: the attributes of the VIP's route.
type Route struct {
	Communities      Field[[]Field[Text]] `yaml:"communities,omitempty,flow"`
	LargeCommunities Field[[]Field[Text]] `yaml:"largeCommunities,omitempty,flow"`
	LocalPreference  Field[Int]           `yaml:"localPreference,omitempty"`
	MED              Field[Int]           `yaml:"med,omitempty"`
}

func (Route) expected() (string, bool) {
	return "expected a mapping such as {communities: [\"65000:100\"], med: 10}, got %s", true
}

// Kubernetes is the kubernetes section.
type Kubernetes struct {
	Kubeconfig      Field[string] `yaml:"kubeconfig,omitempty"`
	NodeName        Field[string] `yaml:"nodeName,omitempty"`
	SecretNamespace Field[string] `yaml:"secretNamespace,omitempty"`
	ServeClassless  Field[bool]   `yaml:"serveClassless,omitempty"`
}

// SetTexts returns a list field of the texts ss.
func SetTexts[S ~string](ss []S) Field[[]Field[Text]] {
	out := make([]Field[Text], len(ss))
	for i, s := range ss {
		out[i] = Set(Text(s))
	}
	return Set(out)
}

// Show returns s as it is when it is a plain word, or else quoted: every
// error stays on one line whatever the input holds.
func Show(s string) string {
	for _, r := range s {
		if r <= ' ' || r > '~' || r == '"' || r == '\\' {
			return strconv.Quote(s)
		}
	}
	if s == "" {
		return `""`
	}
	return s
}
