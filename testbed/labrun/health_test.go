package labrun

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestStream(t *testing.T) {
	var calls atomic.Int64
	errRefused := errors.New("connection refused")
	one := func(ctx context.Context) (string, error) {
		switch k := calls.Add(1); {
		case k%5 == 0:
			return "", errRefused
		case k%7 == 0:
			<-ctx.Done() // no answer: the attempt's timeout ends it
			return "", ctx.Err()
		default:
			return fmt.Sprintf("be%d", k%3+1), nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	got, err := stream(ctx, time.Millisecond, 20*time.Millisecond, one)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("stream ran %s after its context ended", el)
	}
	// One every millisecond, whatever the hung ones do.
	if len(got) < 100 {
		t.Fatalf("%d attempts in 300ms at one per millisecond, want far more", len(got))
	}
	var ok, refused, timedOut int
	for i, a := range got {
		if i > 0 && a.Start.Before(got[i-1].Start) {
			t.Errorf("attempt %d starts before attempt %d", i, i-1)
		}
		if a.End.Before(a.Start) {
			t.Errorf("attempt %d ends before it starts", i)
		}
		switch {
		case a.Err == nil && strings.HasPrefix(a.Backend, "be"):
			ok++
		case errors.Is(a.Err, errRefused) && a.Backend == "":
			refused++
		case a.Err != nil && strings.Contains(a.Err.Error(), "no answer within 20ms") && a.Backend == "":
			timedOut++
			if d := a.End.Sub(a.Start); d < 20*time.Millisecond {
				t.Errorf("a timed-out attempt took only %s", d)
			}
		default:
			t.Errorf("attempt %d: %+v", i, a)
		}
	}
	if ok == 0 || refused == 0 || timedOut == 0 {
		t.Errorf("%d answered, %d refused, %d timed out: want some of each", ok, refused, timedOut)
	}
	// Attempts cut short by the end of the stream are not reported.
	for _, a := range got {
		if errors.Is(a.Err, context.Canceled) {
			t.Errorf("attempt cut short by the end reported: %+v", a)
		}
	}
}

func TestStreamArguments(t *testing.T) {
	one := func(context.Context) (string, error) { return "be1", nil }
	for _, c := range []struct{ every, timeout time.Duration }{{0, time.Second}, {time.Millisecond, 0}} {
		if _, err := stream(context.Background(), c.every, c.timeout, one); err == nil {
			t.Errorf("every %s, timeout %s: no error", c.every, c.timeout)
		}
	}
}
