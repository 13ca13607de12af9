package logfix

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// moduleRoot is the directory of the go.mod above the test's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// TestEveryProblemSaysWhatToDo runs the rule over every package under
// internal/, testbed/ and cmd/.
func TestEveryProblemSaysWhatToDo(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	pkgs, err := Load(fset, root, "./internal/...", "./testbed/...", "./cmd/...")
	if err != nil {
		t.Fatal(err)
	}
	// The walk must reach the packages that log the most; an empty or
	// short list would pass without checking anything.
	loaded := make(map[string]int)
	for _, p := range pkgs {
		loaded[p.Path] = len(p.Files)
	}
	for _, want := range []string{"internal/agent", "internal/dataplane/lb", "internal/api", "internal/health", "testbed/lab", "cmd/xlb"} {
		if loaded["github.com/xlbproject/xlb/"+want] == 0 {
			t.Fatalf("%s not loaded (or without files): %d packages loaded", want, len(pkgs))
		}
	}

	for _, p := range pkgs {
		for _, f := range Check(fset, p.Files, p.Info) {
			if rel, err := filepath.Rel(root, f.Pos.Filename); err == nil {
				f.Pos.Filename = rel
			}
			t.Errorf("%s\n\tsay what to do: log.Warn(\"...\", \"error\", err, %q, \"...\")", f, Key)
		}
	}
}

// fixture holds one call per case; messages starting with "bad" must be
// reported, all others not.
const fixture = `package p

import (
	"context"
	"log/slog"
)

type wrapper struct{ *slog.Logger }

type other struct{}

func (other) Warn(string, ...any)  {}
func (other) Error(string, ...any) {}

const fixKey = "fix"

func f(ctx context.Context, log *slog.Logger, err error, attrs []any, lv slog.Level, w wrapper, o other, msg string) {
	log.Warn("bad: no fix", "error", err)
	log.Error("bad: error without fix", "error", err)
	log.Error("good: fix", "error", err, "fix", "do this")
	log.Warn("good: fix first", "fix", "do this", "error", err)
	log.Warn("good: fix from a constant key", fixKey, "do this")
	log.Warn("good: fix from an expression", "fix", "retry in "+msg)
	log.Warn("bad: fix is a value", "reason", "fix")
	log.Warn("bad: fix misaligned", "error", "fix", "x")
	log.Warn("bad: empty fix", "fix", "")
	log.Warn("bad: blank fix", "fix", "  ")
	log.Warn("bad: fix without value", "error", err, "fix")
	log.Warn("good: attr", slog.String("fix", "do this"))
	log.Warn("good: attr literal", slog.Attr{Key: "fix", Value: slog.StringValue("do this")})
	log.Warn("bad: empty attr", slog.String("fix", ""))
	log.Warn("good: attrs before", slog.Any("error", err), "fix", "do this")
	log.Warn("good: append", append(attrs, "error", err, "fix", "do this")...)
	log.Warn("bad: append", append(attrs, "error", err)...)
	log.Warn("good: spread literal", []any{"fix", "do this"}...)
	log.Warn("bad: opaque spread", attrs...)
	log.WarnContext(ctx, "bad: WarnContext")
	log.ErrorContext(ctx, "good: ErrorContext", "fix", "do this")
	log.Log(ctx, slog.LevelWarn, "bad: Log at warn")
	log.Log(ctx, slog.LevelError+4, "bad: Log above error")
	log.Log(ctx, slog.LevelInfo, "good: Log at info")
	log.Log(ctx, lv, "good: Log at a level not known before it runs")
	log.LogAttrs(ctx, slog.LevelError, "bad: LogAttrs", slog.Any("error", err))
	log.LogAttrs(ctx, slog.LevelWarn, "good: LogAttrs", slog.String("fix", "do this"))
	log.Info("good: info needs none")
	log.Debug("good: debug needs none")
	slog.Warn("bad: package function")
	slog.Error("good: package function", "fix", "do this")
	slog.Default().Error("bad: default logger")
	w.Warn("bad: embedded logger")
	w.Logger.Error("good: embedded logger", "fix", "do this")
	o.Warn("good: not slog")
	o.Error("good: not slog either")
	log.Warn(msg)
}
`

func TestCheck(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", fixture, 0)
	if err != nil {
		t.Fatal(err)
	}
	info := &types.Info{Types: make(map[ast.Expr]types.TypeAndValue), Uses: make(map[*ast.Ident]types.Object)}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	if _, err := conf.Check("p", fset, []*ast.File{f}, info); err != nil {
		t.Fatal(err)
	}
	var want []string
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && strings.HasPrefix(lit.Value, `"bad`) {
			want = append(want, strings.Trim(lit.Value, `"`))
		}
		return true
	})
	want = append(want, "msg") // log.Warn(msg): a message that is not a constant
	var got []string
	for _, fd := range Check(fset, []*ast.File{f}, info) {
		got = append(got, fd.Message)
		if fd.Reason == "" || fd.Pos.Line == 0 {
			t.Errorf("finding without reason or position: %+v", fd)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("reported:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}
