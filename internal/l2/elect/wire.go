// Package elect chooses, among the nodes of a layer-2 configuration, the
// one that answers ARP for each VIP. Each node sends a small UDP
// heartbeat to every other listed node; a node is alive while it was
// heard from within the dead time. The owner of a VIP is the alive node
// that scores highest for it (rendezvous hashing by VIP and node name):
// every node computes the same owner from the same alive set, VIPs spread
// over the nodes, and when a node dies only its own VIPs move.
package elect

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A heartbeat on the wire, network byte order:
//
//	magic "XLB2" | version 1 | flags | name length | name | sequence (8)
//
// The name is the sender's l2.nodes name; flags bit 0 says it is leaving.
// Anything else (another length, version or magic, a bad name) is
// refused whole.
const (
	magic       = "XLB2"
	version     = 1
	flagLeaving = 1
	headerLen   = len(magic) + 3
	// MaxHeartbeat is the longest heartbeat: a name of MaxName bytes.
	MaxHeartbeat = headerLen + MaxName + 8
	// MaxName is the longest node name (a DNS label).
	MaxName = 63
)

// Heartbeat is one node's message to the others.
type Heartbeat struct {
	Name string
	// Leaving: the node is stopping; the others take its VIPs over at
	// once instead of after the dead time.
	Leaving bool
	// Seq counts the sender's heartbeats, for logs and tests.
	Seq uint64
}

// ErrMalformed is what Decode returns for bytes that are no heartbeat.
var ErrMalformed = errors.New("malformed heartbeat")

// Marshal writes h. h.Name must be a valid name (config checks it).
func (h Heartbeat) Marshal() []byte {
	b := make([]byte, 0, headerLen+len(h.Name)+8)
	b = append(b, magic...)
	var flags byte
	if h.Leaving {
		flags |= flagLeaving
	}
	b = append(b, version, flags, byte(len(h.Name)))
	b = append(b, h.Name...)
	return binary.BigEndian.AppendUint64(b, h.Seq)
}

// Decode reads a heartbeat, refusing anything that is not exactly one.
func Decode(b []byte) (Heartbeat, error) {
	if len(b) < headerLen+8 || len(b) > MaxHeartbeat || string(b[:len(magic)]) != magic {
		return Heartbeat{}, ErrMalformed
	}
	ver, flags, n := b[len(magic)], b[len(magic)+1], int(b[len(magic)+2])
	switch {
	case ver != version:
		return Heartbeat{}, fmt.Errorf("%w: version %d, this xlb speaks %d", ErrMalformed, ver, version)
	case flags&^flagLeaving != 0:
		return Heartbeat{}, fmt.Errorf("%w: unknown flags %#x", ErrMalformed, flags)
	case n == 0 || n > MaxName || len(b) != headerLen+n+8:
		return Heartbeat{}, fmt.Errorf("%w: name length %d in %d bytes", ErrMalformed, n, len(b))
	}
	name := b[headerLen : headerLen+n]
	if !validName(name) {
		return Heartbeat{}, fmt.Errorf("%w: bad node name", ErrMalformed)
	}
	return Heartbeat{Name: string(name), Leaving: flags&flagLeaving != 0, Seq: binary.BigEndian.Uint64(b[headerLen+n:])}, nil
}

// validName: a DNS label, as config requires of l2.nodes names.
func validName(b []byte) bool {
	if len(b) == 0 || len(b) > MaxName || b[0] == '-' || b[len(b)-1] == '-' {
		return false
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
