package bfd

import (
	"fmt"
	"time"
)

// Defaults for the zero fields of a Config: a failure is detected in
// about 900 ms, fast enough to beat BGP's hold timer by an order of
// magnitude and slow enough for a user-space sender on a busy host.
const (
	DefaultMinTx      = 300 * time.Millisecond
	DefaultMinRx      = 300 * time.Millisecond
	DefaultMultiplier = 3
)

// Limits of MinTx and MinRx. Below 10 ms a Go timer on a loaded host
// jitters by a large part of the interval and sessions flap; above a
// minute BFD detects nothing BGP's hold timer would not (FRR takes the
// same range).
const (
	MinInterval = 10 * time.Millisecond
	MaxInterval = 60 * time.Second
)

// Config holds one session's timers (RFC 5880 §6.8.1). A zero field
// takes its default.
type Config struct {
	// MinTx is bfd.DesiredMinTxInterval: how often we would like to
	// send while the session is Up. While it is not Up we send at most
	// once a second (§6.8.3).
	MinTx time.Duration
	// MinRx is bfd.RequiredMinRxInterval: how often we can take the
	// peer's packets.
	MinRx time.Duration
	// Multiplier is bfd.DetectMult: the peer declares us down after
	// this many of our intervals without a packet.
	Multiplier uint8
	// Passive sessions send nothing until the peer has spoken
	// (§6.1), for a router that only answers peers it hears from.
	Passive bool
}

// DefaultConfig returns the configuration that zero fields stand for.
func DefaultConfig() Config {
	return Config{MinTx: DefaultMinTx, MinRx: DefaultMinRx, Multiplier: DefaultMultiplier}
}

// WithDefaults returns c with its zero fields set to the defaults.
func (c Config) WithDefaults() Config {
	if c.MinTx == 0 {
		c.MinTx = DefaultMinTx
	}
	if c.MinRx == 0 {
		c.MinRx = DefaultMinRx
	}
	if c.Multiplier == 0 {
		c.Multiplier = DefaultMultiplier
	}
	return c
}

// Validate reports the first field that is out of range. Zero fields
// are valid: they take the defaults.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"minTx", c.MinTx}, {"minRx", c.MinRx}} {
		if err := validInterval(f.d); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	return nil
}

func validInterval(d time.Duration) error {
	switch {
	case d == 0:
		return nil
	case d < MinInterval:
		return fmt.Errorf("%v is below the minimum of %v", d, MinInterval)
	case d > MaxInterval:
		return fmt.Errorf("%v is above the maximum of %v", d, MaxInterval)
	case d%time.Microsecond != 0:
		// The wire carries microseconds.
		return fmt.Errorf("%v is not a whole number of microseconds", d)
	}
	return nil
}
