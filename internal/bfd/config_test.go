package bfd

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr string // substring; empty for valid
	}{
		{"zero takes defaults", Config{}, ""},
		{"defaults", DefaultConfig(), ""},
		{"limits", Config{MinTx: MinInterval, MinRx: MaxInterval, Multiplier: 1}, ""},
		{"minTx too small", Config{MinTx: 9 * time.Millisecond}, "minTx: 9ms is below the minimum of 10ms"},
		{"minTx negative", Config{MinTx: -time.Second}, "minTx: -1s is below the minimum"},
		{"minRx too large", Config{MinRx: 61 * time.Second}, "minRx: 1m1s is above the maximum of 1m0s"},
		{"minRx sub-microsecond", Config{MinRx: 100*time.Millisecond + 1}, "minRx: 100.000001ms is not a whole number of microseconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestConfigWithDefaults(t *testing.T) {
	got := Config{MinRx: 50 * time.Millisecond, Passive: true}.WithDefaults()
	want := Config{MinTx: DefaultMinTx, MinRx: 50 * time.Millisecond, Multiplier: DefaultMultiplier, Passive: true}
	if got != want {
		t.Fatalf("WithDefaults() = %+v, want %+v", got, want)
	}
}
