package bfd

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// State is a BFD session state, numbered as on the wire (RFC 5880 §4.1).
type State uint8

// Session states.
const (
	StateAdminDown State = 0
	StateDown      State = 1
	StateInit      State = 2
	StateUp        State = 3
)

var stateNames = [...]string{"AdminDown", "Down", "Init", "Up"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// MarshalText makes a State read as its name in JSON status output.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Diag is a BFD diagnostic code: the reason for the last change of the
// local state (RFC 5880 §4.1).
type Diag uint8

// Diagnostic codes.
const (
	DiagNone                        Diag = 0
	DiagDetectionTimeExpired        Diag = 1 // Control Detection Time Expired
	DiagEchoFailed                  Diag = 2
	DiagNeighborDown                Diag = 3 // Neighbor Signaled Session Down
	DiagForwardingReset             Diag = 4
	DiagPathDown                    Diag = 5
	DiagConcatenatedPathDown        Diag = 6
	DiagAdminDown                   Diag = 7 // Administratively Down
	DiagReverseConcatenatedPathDown Diag = 8
)

var diagNames = [...]string{
	"No Diagnostic",
	"Control Detection Time Expired",
	"Echo Function Failed",
	"Neighbor Signaled Session Down",
	"Forwarding Plane Reset",
	"Path Down",
	"Concatenated Path Down",
	"Administratively Down",
	"Reverse Concatenated Path Down",
}

func (d Diag) String() string {
	if int(d) < len(diagNames) {
		return diagNames[d]
	}
	return fmt.Sprintf("Diag(%d)", uint8(d))
}

// MarshalText makes a Diag read as its name in JSON status output.
func (d Diag) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

const (
	version       = 1
	headerLen     = 24 // mandatory section of a control packet
	minAuthLength = 26 // mandatory section plus the smallest authentication section
)

// Flag bits of the second octet.
const (
	flagPoll       = 1 << 5
	flagFinal      = 1 << 4
	flagCPI        = 1 << 3 // Control Plane Independent
	flagAuth       = 1 << 2
	flagDemand     = 1 << 1
	flagMultipoint = 1 << 0
	stateShift     = 6
	diagMask       = 0x1f
	versionShift   = 5
)

// packet is a BFD control packet (RFC 5880 §4.1) without authentication
// section. Intervals are in microseconds, as on the wire.
type packet struct {
	diag          Diag
	state         State
	poll          bool
	final         bool
	cpi           bool
	auth          bool
	demand        bool
	multipoint    bool
	detectMult    uint8
	myDiscr       uint32
	yourDiscr     uint32
	desiredMinTx  uint32
	requiredMinRx uint32
	requiredEcho  uint32
}

// Reasons a received packet is discarded, in the order RFC 5880 §6.8.6
// checks them (the session lookup by Your Discriminator comes after, in
// the Manager).
var (
	errShort      = errors.New("shorter than a BFD control packet")
	errVersion    = errors.New("unsupported BFD version")
	errLength     = errors.New("invalid length field")
	errDetectMult = errors.New("detect multiplier is zero")
	errMultipoint = errors.New("multipoint bit set")
	errMyDiscr    = errors.New("my discriminator is zero")
	errYourDiscr  = errors.New("your discriminator is zero in a state other than Down or AdminDown")
	errAuth       = errors.New("authentication present (not supported)")
	errPollFinal  = errors.New("poll and final bits both set")
)

// decode parses and checks a control packet: every check of RFC 5880
// §6.8.6 that needs no session state. b may be longer than the packet
// (the Length field rules); it is never retained.
func decode(b []byte) (packet, error) {
	var p packet
	if len(b) < headerLen {
		return p, errShort
	}
	if b[0]>>versionShift != version {
		return p, fmt.Errorf("%w %d", errVersion, b[0]>>versionShift)
	}
	p.diag = Diag(b[0] & diagMask)
	flags := b[1]
	p.state = State(flags >> stateShift)
	p.poll = flags&flagPoll != 0
	p.final = flags&flagFinal != 0
	p.cpi = flags&flagCPI != 0
	p.auth = flags&flagAuth != 0
	p.demand = flags&flagDemand != 0
	p.multipoint = flags&flagMultipoint != 0
	p.detectMult = b[2]
	length := int(b[3])
	p.myDiscr = binary.BigEndian.Uint32(b[4:])
	p.yourDiscr = binary.BigEndian.Uint32(b[8:])
	p.desiredMinTx = binary.BigEndian.Uint32(b[12:])
	p.requiredMinRx = binary.BigEndian.Uint32(b[16:])
	p.requiredEcho = binary.BigEndian.Uint32(b[20:])

	switch {
	case length < headerLen || (p.auth && length < minAuthLength):
		return p, fmt.Errorf("%w %d", errLength, length)
	case length > len(b):
		return p, fmt.Errorf("%w %d: only %d bytes received", errLength, length, len(b))
	case p.detectMult == 0:
		return p, errDetectMult
	case p.multipoint:
		return p, errMultipoint
	case p.myDiscr == 0:
		return p, errMyDiscr
	case p.yourDiscr == 0 && p.state != StateDown && p.state != StateAdminDown:
		return p, errYourDiscr
	case p.auth:
		// We configure no authentication, so §6.8.6 says discard.
		return p, errAuth
	case p.poll && p.final:
		// §4.1: a packet MUST NOT carry both; a peer that sends one
		// is broken, and answering it would be guesswork.
		return p, errPollFinal
	}
	return p, nil
}

// encode appends the 24-byte wire form of p to b.
func (p *packet) encode(b []byte) []byte {
	flags := byte(p.state&3)<<stateShift |
		bit(p.poll, flagPoll) | bit(p.final, flagFinal) | bit(p.cpi, flagCPI) |
		bit(p.auth, flagAuth) | bit(p.demand, flagDemand) | bit(p.multipoint, flagMultipoint)
	b = append(b, version<<versionShift|byte(p.diag)&diagMask, flags, p.detectMult, headerLen)
	b = binary.BigEndian.AppendUint32(b, p.myDiscr)
	b = binary.BigEndian.AppendUint32(b, p.yourDiscr)
	b = binary.BigEndian.AppendUint32(b, p.desiredMinTx)
	b = binary.BigEndian.AppendUint32(b, p.requiredMinRx)
	b = binary.BigEndian.AppendUint32(b, p.requiredEcho)
	return b
}

func bit(set bool, b byte) byte {
	if set {
		return b
	}
	return 0
}
