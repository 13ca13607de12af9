package schema

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Error is one problem in a configuration, located by line and field
// path, e.g. "agent.yaml:14: services[1].backends[0].address: ...".
type Error struct {
	File string
	Line int    // 1-based; 0 when the problem has no single line
	Path string // field path, e.g. services[1].backends[0].address; "" for the whole file
	Msg  string // the reason and, where useful, what to do
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// MaxErrors bounds a report: after that many the user learns how many
// more there are, not what they are.
const MaxErrors = 50

// Errors collects the problems of one configuration, each once.
type Errors struct {
	File string
	list []*Error
	seen map[Error]bool // a mapping merged in many places fails the same way in each
}

// Add records a problem at line (0: none) and path, unless it is recorded
// already. It reports whether it was new.
func (l *Errors) Add(line int, path, format string, args ...any) bool {
	e := Error{File: l.File, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)}
	if l.seen[e] {
		return false
	}
	if l.seen == nil {
		l.seen = map[Error]bool{}
	}
	l.seen[e] = true
	l.list = append(l.list, &e)
	return true
}

// Len is the number of problems recorded.
func (l *Errors) Len() int { return len(l.list) }

// Merge adds the problems of o, each once.
func (l *Errors) Merge(o *Errors) {
	for _, e := range o.list {
		l.Add(e.Line, e.Path, "%s", e.Msg)
	}
}

// Err returns every problem, sorted by line (in the order found within
// a line), one per line, at most MaxErrors of them; nil without one.
// Each is an *Error.
func (l *Errors) Err() error {
	if len(l.list) == 0 {
		return nil
	}
	list := slices.Clone(l.list)
	slices.SortStableFunc(list, func(a, b *Error) int { return cmp.Compare(a.Line, b.Line) })
	errs := make([]error, 0, min(len(list), MaxErrors)+1)
	for i, e := range list {
		if i == MaxErrors {
			errs = append(errs, fmt.Errorf("%s: %d more errors not shown; fix the ones above first", l.File, len(list)-MaxErrors))
			break
		}
		errs = append(errs, e)
	}
	return errors.Join(errs...)
}
