package elect

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestHeartbeatRoundTrip(t *testing.T) {
	for _, h := range []Heartbeat{
		{Name: "a", Seq: 1},
		{Name: "node-7", Leaving: true, Seq: 1<<64 - 1},
		{Name: strings.Repeat("x", MaxName)},
	} {
		got, err := Decode(h.Marshal())
		if err != nil || got != h {
			t.Errorf("%+v: decoded %+v, %v", h, got, err)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	good := Heartbeat{Name: "b", Seq: 7}.Marshal()
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for name, b := range map[string][]byte{
		"empty":          nil,
		"short":          good[:len(good)-1],
		"long":           append(bytes.Clone(good), 0),
		"magic":          edit(func(b []byte) []byte { b[0] = 'Y'; return b }),
		"version":        edit(func(b []byte) []byte { b[4] = 2; return b }),
		"flags":          edit(func(b []byte) []byte { b[5] = 2; return b }),
		"name length 0":  edit(func(b []byte) []byte { b[6] = 0; return b }),
		"name too long":  edit(func(b []byte) []byte { b[6] = 200; return b }),
		"upper case":     Heartbeat{Name: "B"}.Marshal(),
		"leading dash":   Heartbeat{Name: "-b"}.Marshal(),
		"NUL in name":    Heartbeat{Name: "b\x00"}.Marshal(),
		"name of 64":     Heartbeat{Name: strings.Repeat("x", 64)}.Marshal(),
		"oversized name": Heartbeat{Name: strings.Repeat("x", 300)}.Marshal(),
	} {
		if h, err := Decode(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: decoded %+v, %v", name, h, err)
		}
	}
}

// FuzzDecode: whatever arrives, Decode returns an error or a heartbeat
// that marshals back to exactly the bytes it came from.
//
//	go test -fuzz FuzzDecode -fuzztime 30s ./internal/l2/elect/
func FuzzDecode(f *testing.F) {
	f.Add(Heartbeat{Name: "a", Seq: 1}.Marshal())
	f.Add(Heartbeat{Name: "node-b", Leaving: true, Seq: 99}.Marshal())
	f.Add([]byte("XLB2"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if !validName([]byte(h.Name)) {
			t.Fatalf("decoded an invalid name %q", h.Name)
		}
		if out := h.Marshal(); !bytes.Equal(out, b) {
			t.Fatalf("decoded %+v from %x, which marshals to %x", h, b, out)
		}
	})
}
