package demo

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// indent lines up everything under a step's title.
const indent = "      "

// printer writes the demo's numbered steps, indented results and tables.
type printer struct {
	w       io.Writer
	n       int // steps so far
	total   int
	started time.Time // of the current step
}

func (p *printer) printf(format string, args ...any) { fmt.Fprintf(p.w, format, args...) }

func (p *printer) step(title string) {
	p.n++
	p.started = time.Now()
	p.printf("\n[%d/%d] %s\n", p.n, p.total, title)
}

// done reports the current step's success after its title.
func (p *printer) done(format string, args ...any) {
	p.printf(indent+"ok (%s)\n", fmt.Sprintf(format, args...))
}

// fail reports the current step's failure and returns err.
func (p *printer) fail(err error) error {
	p.printf(indent + "FAILED\n")
	return err
}

func (p *printer) line(format string, args ...any) {
	p.printf(indent+format+"\n", args...)
}

func (p *printer) blank()  { p.printf("\n") }
func (p *printer) indent() { p.printf(indent) }

// progress returns a callback for labrun's loads that prints the answers
// so far at every quarter of n, on one line.
func (p *printer) progress(n int) func(done int) {
	next := 1
	return func(done int) {
		if next > 4 || done*4 < next*n {
			return
		}
		p.printf("%d ", done)
		for next <= 4 && done*4 >= next*n {
			next++
		}
	}
}

// table is an indented table with aligned columns.
type table struct {
	tw *tabwriter.Writer
}

func (p *printer) table() *table {
	return &table{tw: tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)}
}

func (t *table) row(cells ...string) {
	fmt.Fprintln(t.tw, indent+strings.Join(cells, "\t"))
}

func (t *table) flush() { _ = t.tw.Flush() }

// percent formats n of total as a share.
func percent(n, total int) string {
	if total == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(total))
}

// barWidth is the length of a bar for 50%.
const barWidth = 40

// bar draws n of total as a bar of '#', barWidth long for half of the
// total, so that four equal shares are a quarter of that each and the
// differences between them show.
func bar(n, total int) string {
	if total <= 0 || n <= 0 {
		return ""
	}
	w := int(float64(n) / float64(total) * 2 * barWidth)
	return strings.Repeat("#", max(w, 1))
}
