package bfd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// validPacket is a packet that passes every check of decode.
func validPacket() packet {
	return packet{
		diag:          DiagNeighborDown,
		state:         StateUp,
		detectMult:    3,
		myDiscr:       0x01020304,
		yourDiscr:     0x0a0b0c0d,
		desiredMinTx:  300000,
		requiredMinRx: 250000,
	}
}

func TestEncodeLayout(t *testing.T) {
	p := validPacket()
	p.poll = true
	p.requiredEcho = 50000
	got := p.encode(nil)
	want := []byte{
		0x23,  // version 1, diag 3
		0xe0,  // state Up (3<<6), P
		3, 24, // detect mult, length
		1, 2, 3, 4, // my discriminator
		0x0a, 0x0b, 0x0c, 0x0d, // your discriminator
		0x00, 0x04, 0x93, 0xe0, // 300000 µs
		0x00, 0x03, 0xd0, 0x90, // 250000 µs
		0x00, 0x00, 0xc3, 0x50, // 50000 µs
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encode:\n got % x\nwant % x", got, want)
	}
}

func TestRoundTrip(t *testing.T) {
	mod := func(f func(*packet)) packet { p := validPacket(); f(&p); return p }
	for name, p := range map[string]packet{
		"up":             validPacket(),
		"poll":           mod(func(p *packet) { p.poll = true }),
		"final":          mod(func(p *packet) { p.final = true }),
		"down, no yours": mod(func(p *packet) { p.state, p.yourDiscr, p.diag = StateDown, 0, DiagNone }),
		"admin down":     mod(func(p *packet) { p.state, p.yourDiscr, p.diag = StateAdminDown, 0, DiagAdminDown }),
		"init":           mod(func(p *packet) { p.state = StateInit }),
		"cpi demand":     mod(func(p *packet) { p.cpi, p.demand = true, true }),
		"max values": mod(func(p *packet) {
			p.diag, p.detectMult = 31, 255
			p.myDiscr, p.yourDiscr = ^uint32(0), ^uint32(0)
			p.desiredMinTx, p.requiredMinRx, p.requiredEcho = ^uint32(0), ^uint32(0), ^uint32(0)
		}),
	} {
		t.Run(name, func(t *testing.T) {
			b := p.encode(nil)
			if len(b) != headerLen {
				t.Fatalf("encoded %d bytes, want %d", len(b), headerLen)
			}
			got, err := decode(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got != p {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, p)
			}
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	valid := validPacket()
	wire := func(f func(b []byte) []byte) []byte { return f(valid.encode(nil)) }
	withPacket := func(f func(*packet)) []byte { p := valid; f(&p); return p.encode(nil) }
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, errShort},
		{"23 bytes", wire(func(b []byte) []byte { return b[:23] }), errShort},
		{"version 0", wire(func(b []byte) []byte { b[0] &= 0x1f; return b }), errVersion},
		{"version 2", wire(func(b []byte) []byte { b[0] = 2<<5 | b[0]&0x1f; return b }), errVersion},
		{"length 23", wire(func(b []byte) []byte { b[3] = 23; return b }), errLength},
		{"length 0", wire(func(b []byte) []byte { b[3] = 0; return b }), errLength},
		{"length beyond payload", wire(func(b []byte) []byte { b[3] = 25; return b }), errLength},
		{"auth bit, length 24", wire(func(b []byte) []byte { b[1] |= flagAuth; return b }), errLength},
		{"detect mult 0", withPacket(func(p *packet) { p.detectMult = 0 }), errDetectMult},
		{"multipoint", withPacket(func(p *packet) { p.multipoint = true }), errMultipoint},
		{"my discriminator 0", withPacket(func(p *packet) { p.myDiscr = 0 }), errMyDiscr},
		{"your discriminator 0 in Up", withPacket(func(p *packet) { p.yourDiscr = 0 }), errYourDiscr},
		{"your discriminator 0 in Init", withPacket(func(p *packet) { p.yourDiscr, p.state = 0, StateInit }), errYourDiscr},
		{"authentication", wire(func(b []byte) []byte {
			b[1] |= flagAuth
			b[3] = 28
			// Simple password section: type 1, length 4, key 1, "x".
			return append(b, 1, 4, 1, 'x')
		}), errAuth},
		{"poll and final", withPacket(func(p *packet) { p.poll, p.final = true, true }), errPollFinal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decode(tc.b)
			if !errors.Is(err, tc.want) {
				t.Fatalf("decode(% x) = %v, want %v", tc.b, err, tc.want)
			}
		})
	}
}

func TestDecodeAcceptsTrailingBytes(t *testing.T) {
	// §6.8.6 only rejects a Length beyond the payload: a longer
	// datagram is fine, and so is a Length that covers the extra bytes.
	p := validPacket()
	b := append(p.encode(nil), 0xde, 0xad)
	if got, err := decode(b); err != nil || got != p {
		t.Fatalf("decode with trailing bytes = %+v, %v", got, err)
	}
	b[3] = 26
	if got, err := decode(b); err != nil || got != p {
		t.Fatalf("decode with Length 26 = %+v, %v", got, err)
	}
}

func FuzzDecode(f *testing.F) {
	p := validPacket()
	f.Add(p.encode(nil))
	p.state, p.yourDiscr = StateDown, 0
	f.Add(p.encode(nil))
	f.Add([]byte{})
	f.Add(make([]byte, 24))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decode(b)
		if err != nil {
			return
		}
		// Whatever decode accepts must satisfy the checks and survive
		// a round trip.
		if got.detectMult == 0 || got.myDiscr == 0 || got.multipoint || got.auth || (got.poll && got.final) {
			t.Fatalf("decode accepted an invalid packet: %+v", got)
		}
		if int(b[3]) > len(b) || b[3] < headerLen {
			t.Fatalf("decode accepted Length %d for %d bytes", b[3], len(b))
		}
		again, err := decode(got.encode(nil))
		if err != nil || again != got {
			t.Fatalf("round trip of %+v: %+v, %v", got, again, err)
		}
		if binary.BigEndian.Uint32(b[4:]) != got.myDiscr {
			t.Fatalf("my discriminator %d, wire says %d", got.myDiscr, binary.BigEndian.Uint32(b[4:]))
		}
	})
}

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{StateUp.String(), "Up"},
		{StateAdminDown.String(), "AdminDown"},
		{State(9).String(), "State(9)"},
		{DiagDetectionTimeExpired.String(), "Control Detection Time Expired"},
		{DiagNeighborDown.String(), "Neighbor Signaled Session Down"},
		{DiagAdminDown.String(), "Administratively Down"},
		{Diag(30).String(), "Diag(30)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
