package demo

import (
	"bytes"
	"strings"
	"testing"
)

func TestOptionsDefaults(t *testing.T) {
	for _, c := range []struct {
		name     string
		in       Options
		prefix   string
		requests int
		err      string
	}{
		{"defaults", Options{Binary: "/bin/true"}, DefaultPrefix, DefaultRequests, ""},
		{"given", Options{Prefix: "mydemo", Requests: 300, Binary: "/bin/true"}, "mydemo", 300, ""},
		{"smallest", Options{Requests: MinRequests, Binary: "/bin/true"}, DefaultPrefix, MinRequests, ""},
		{"too few", Options{Requests: MinRequests - 1, Binary: "/bin/true"}, "", 0, "want 100 to"},
		{"negative", Options{Requests: -5, Binary: "/bin/true"}, "", 0, "-5 requests"},
		{"too many", Options{Requests: MaxRequests + 1, Binary: "/bin/true"}, "", 0, "want 100 to"},
		{"bad prefix", Options{Prefix: "Demo!", Binary: "/bin/true"}, "", 0, `lab prefix "Demo!"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.in
			err := o.defaults()
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.Prefix != c.prefix || o.Requests != c.requests || o.Out == nil {
				t.Errorf("got %+v, want prefix %q, %d requests, an output", o, c.prefix, c.requests)
			}
		})
	}
}

func TestPercentAndBar(t *testing.T) {
	for _, c := range []struct {
		n, total int
		pct      string
		bar      int
	}{
		{500, 2000, "25.0%", barWidth / 2},
		{1000, 2000, "50.0%", barWidth},
		{2000, 2000, "100.0%", 2 * barWidth},
		{1, 2000, "0.1%", 1}, // a share is never invisible
		{0, 2000, "0.0%", 0},
		{0, 0, "-", 0},
	} {
		if got := percent(c.n, c.total); got != c.pct {
			t.Errorf("percent(%d, %d) = %q, want %q", c.n, c.total, got, c.pct)
		}
		if got := bar(c.n, c.total); len(got) != c.bar || strings.Trim(got, "#") != "" {
			t.Errorf("bar(%d, %d) = %q, want %d '#'", c.n, c.total, got, c.bar)
		}
	}
}

func TestProgressPrintsQuarters(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{
		{2000, "500 1000 1500 2000 "},
		{50, "13 25 38 50 "},
		{3, "1 2 3 "}, // fewer answers than quarters: each at most once
		{1, "1 "},
	} {
		var out bytes.Buffer
		p := &printer{w: &out}
		f := p.progress(c.n)
		for done := 1; done <= c.n; done++ {
			f(done)
		}
		if out.String() != c.want {
			t.Errorf("n=%d: printed %q, want %q", c.n, out.String(), c.want)
		}
	}
}

func TestGenerations(t *testing.T) {
	for _, c := range []struct {
		in   []uint64
		want string
	}{
		{[]uint64{2, 2}, "2"},
		{[]uint64{2, 3}, "2, 3"},
		{[]uint64{4}, "4"},
	} {
		if got := generations(c.in); got != c.want {
			t.Errorf("generations(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestTableAlignsColumns(t *testing.T) {
	var out bytes.Buffer
	p := &printer{w: &out}
	tb := p.table()
	tb.row("BACKEND", "REQUESTS")
	tb.row("be1", "510")
	tb.flush()
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %q", len(lines), out.String())
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, indent) {
			t.Errorf("line %q is not indented", l)
		}
	}
	if strings.Index(lines[0], "REQUESTS") != strings.Index(lines[1], "510") {
		t.Errorf("columns not aligned:\n%s", out.String())
	}
}
