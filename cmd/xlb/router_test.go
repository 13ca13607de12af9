package main

import (
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/bfd"
)

func TestParseBFD(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    bfd.Config
		wantErr string // a part of the error; "" for none
	}{
		{"100ms,100ms,3", bfd.Config{MinRx: 100 * time.Millisecond, MinTx: 100 * time.Millisecond, Multiplier: 3}, ""},
		{" 300ms , 50ms , 5 ", bfd.Config{MinRx: 300 * time.Millisecond, MinTx: 50 * time.Millisecond, Multiplier: 5}, ""},
		{"1s,2s,255", bfd.Config{MinRx: time.Second, MinTx: 2 * time.Second, Multiplier: 255}, ""},
		{"100ms,100ms", bfd.Config{}, "want minRx,minTx,multiplier"},
		{"fast,100ms,3", bfd.Config{}, "minRx"},
		{"100ms,-1ms,3", bfd.Config{}, "minTx"},
		{"100ms,100ms,0", bfd.Config{}, "multiplier"},
		{"100ms,100ms,256", bfd.Config{}, "multiplier"},
		{"5ms,100ms,3", bfd.Config{}, "minRx: 5ms is below the minimum"},
		{"100ms,2m,3", bfd.Config{}, "minTx: 2m0s is above the maximum"},
	} {
		got, err := parseBFD(tt.in)
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "--bfd") {
				t.Errorf("parseBFD(%q) = %+v, %v; want an error about --bfd %s", tt.in, got, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("parseBFD(%q): %v", tt.in, err)
		case got != tt.want:
			t.Errorf("parseBFD(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}
