// Package logfix checks xlb's rule for log lines: every warning and error
// logged through log/slog says what to do about it, in a "fix" attribute
// (log.Warn("...", "error", err, "fix", "...")). The rule's test runs
// Check over every package under internal/, testbed/ and cmd/.
package logfix

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/printer"
	"go/token"
	"go/types"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Key is the attribute that says what to do.
const Key = "fix"

// Finding is a log call that breaks the rule.
type Finding struct {
	Pos     token.Position
	Func    string // the slog function or method, e.g. "Logger.Warn"
	Message string // the message, when it is a constant; else its source
	Reason  string
}

func (f Finding) String() string {
	return fmt.Sprintf("%s: %s(%q): %s", f.Pos, f.Func, f.Message, f.Reason)
}

// Check reports the calls in files that log at level Warn or above through
// log/slog (a *slog.Logger's methods or the package's functions) without a
// non-empty "fix" attribute. info must hold Types and Uses for files.
// A call whose level is not a constant is not checked: its level is not
// known before it runs.
func Check(fset *token.FileSet, files []*ast.File, info *types.Info) []Finding {
	var out []Finding
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			name, msgAt, ok := slogCall(call, info)
			if !ok || len(call.Args) <= msgAt {
				return true
			}
			if msgAt == 2 { // Log and LogAttrs: (ctx, level, msg, ...)
				lv, known := level(call.Args[1], info)
				if !known || lv < slog.LevelWarn {
					return true
				}
			}
			if reason := missingFix(call, msgAt, info); reason != "" {
				out = append(out, Finding{
					Pos:     fset.Position(call.Pos()),
					Func:    name,
					Message: message(fset, call.Args[msgAt], info),
					Reason:  reason,
				})
			}
			return true
		})
	}
	return out
}

// slogCall reports whether call logs through log/slog at a level the rule
// covers (or at a level given as an argument, for Log and LogAttrs), the
// function's name, and the index of the message argument.
func slogCall(call *ast.CallExpr, info *types.Info) (name string, msgAt int, ok bool) {
	var id *ast.Ident
	switch fn := ast.Unparen(call.Fun).(type) {
	case *ast.SelectorExpr:
		id = fn.Sel
	case *ast.Ident:
		id = fn
	default:
		return "", 0, false
	}
	f, isFunc := info.Uses[id].(*types.Func)
	if !isFunc || f.Pkg() == nil || f.Pkg().Path() != "log/slog" {
		return "", 0, false
	}
	name = f.Name()
	if recv := f.Signature().Recv(); recv != nil {
		ptr, isPtr := recv.Type().(*types.Pointer)
		if !isPtr {
			return "", 0, false
		}
		named, isNamed := ptr.Elem().(*types.Named)
		if !isNamed || named.Obj().Name() != "Logger" {
			return "", 0, false
		}
		name = "Logger." + name
	}
	switch f.Name() {
	case "Warn", "Error":
		return name, 0, true
	case "WarnContext", "ErrorContext":
		return name, 1, true
	case "Log", "LogAttrs":
		return name, 2, true
	}
	return "", 0, false
}

// level is the constant value of a slog.Level argument.
func level(e ast.Expr, info *types.Info) (slog.Level, bool) {
	tv, ok := info.Types[e]
	if !ok || tv.Value == nil {
		return 0, false
	}
	v, exact := constant.Int64Val(constant.ToInt(tv.Value))
	if !exact {
		return 0, false
	}
	return slog.Level(v), true
}

// item is one element of a log call's key-value list; opaque stands for a
// slice whose elements the source does not show (a variable spread with
// ...), taken to hold whole pairs.
type item struct {
	expr   ast.Expr
	opaque bool
}

// missingFix says why the call has no usable fix attribute, or "" when it
// has one.
func missingFix(call *ast.CallExpr, msgAt int, info *types.Info) string {
	args := call.Args[msgAt+1:]
	var items []item
	if call.Ellipsis.IsValid() && len(args) > 0 {
		items = append(items, exprItems(args[:len(args)-1])...)
		items = append(items, spread(args[len(args)-1], info)...)
	} else {
		items = exprItems(args)
	}
	for i := 0; i < len(items); i++ {
		it := items[i]
		if it.opaque {
			continue
		}
		if isAttr(it.expr, info) {
			if k, v, ok := attrKeyValue(it.expr, info); ok && k == Key {
				return emptyValue(v, info)
			}
			continue
		}
		// A key: the next item is its value.
		if s, ok := stringConst(it.expr, info); ok && s == Key {
			if i+1 >= len(items) || items[i+1].opaque {
				return `"fix" has no value`
			}
			return emptyValue(items[i+1].expr, info)
		}
		i++
	}
	return `no "fix" attribute saying what to do`
}

func exprItems(es []ast.Expr) []item {
	out := make([]item, len(es))
	for i, e := range es {
		out[i] = item{expr: e}
	}
	return out
}

// spread lists what a slice passed with ... holds, as far as the source
// shows: the elements of a composite literal, and those that append adds.
func spread(e ast.Expr, info *types.Info) []item {
	switch x := ast.Unparen(e).(type) {
	case *ast.CompositeLit:
		return exprItems(x.Elts)
	case *ast.CallExpr:
		if id, ok := ast.Unparen(x.Fun).(*ast.Ident); ok && len(x.Args) > 0 {
			if b, ok := info.Uses[id].(*types.Builtin); ok && b.Name() == "append" {
				out := spread(x.Args[0], info)
				if x.Ellipsis.IsValid() {
					if len(x.Args) != 2 {
						return append(out, item{opaque: true})
					}
					return append(out, spread(x.Args[1], info)...)
				}
				return append(out, exprItems(x.Args[1:])...)
			}
		}
	}
	return []item{{opaque: true}}
}

func isAttr(e ast.Expr, info *types.Info) bool {
	tv, ok := info.Types[e]
	if !ok {
		return false
	}
	named, ok := tv.Type.(*types.Named)
	return ok && named.Obj().Pkg() != nil && named.Obj().Pkg().Path() == "log/slog" && named.Obj().Name() == "Attr"
}

// attrKeyValue reads the key and value of an Attr built in place:
// slog.String("fix", v) and its siblings, or slog.Attr{Key: "fix", ...}.
func attrKeyValue(e ast.Expr, info *types.Info) (string, ast.Expr, bool) {
	switch x := ast.Unparen(e).(type) {
	case *ast.CallExpr:
		if len(x.Args) < 2 {
			return "", nil, false
		}
		k, ok := stringConst(x.Args[0], info)
		return k, x.Args[1], ok
	case *ast.CompositeLit:
		var key string
		var value ast.Expr
		var ok bool
		for _, el := range x.Elts {
			kv, isKV := el.(*ast.KeyValueExpr)
			if !isKV {
				continue
			}
			switch id, _ := kv.Key.(*ast.Ident); {
			case id == nil:
			case id.Name == "Key":
				key, ok = stringConst(kv.Value, info)
			case id.Name == "Value":
				value = kv.Value
			}
		}
		return key, value, ok
	}
	return "", nil, false
}

// emptyValue objects to a fix that is a constant empty string or missing.
func emptyValue(v ast.Expr, info *types.Info) string {
	if v == nil {
		return `"fix" has no value`
	}
	if s, ok := stringConst(v, info); ok && strings.TrimSpace(s) == "" {
		return `"fix" is empty`
	}
	return ""
}

func stringConst(e ast.Expr, info *types.Info) (string, bool) {
	tv, ok := info.Types[e]
	if !ok || tv.Value == nil || tv.Value.Kind() != constant.String {
		return "", false
	}
	return constant.StringVal(tv.Value), true
}

func message(fset *token.FileSet, e ast.Expr, info *types.Info) string {
	if s, ok := stringConst(e, info); ok {
		return s
	}
	var b strings.Builder
	if err := printer.Fprint(&b, fset, e); err != nil {
		return "?"
	}
	return b.String()
}

// Package is a type-checked package of the module.
type Package struct {
	Path  string
	Dir   string
	Files []*ast.File
	Info  *types.Info
}

// Load type-checks the packages that patterns name, relative to the
// module directory dir, from their non-test Go files. Their dependencies
// come from the export data that `go list -export` builds, so Load needs
// the go command and the packages must compile.
func Load(fset *token.FileSet, dir string, patterns ...string) ([]Package, error) {
	cmd := exec.Command("go", append([]string{"list", "-e", "-export", "-deps", "-json=ImportPath,Dir,GoFiles,Export,ImportMap,DepOnly,Error"}, patterns...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w\n%s", err, stderr.Bytes())
	}
	type listed struct {
		ImportPath string
		Dir        string
		GoFiles    []string
		Export     string
		ImportMap  map[string]string
		DepOnly    bool
		Error      *struct{ Err string }
	}
	var targets []listed
	exports := make(map[string]string)
	var errs []error
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p listed
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		if p.Error != nil {
			errs = append(errs, fmt.Errorf("%s: %s", p.ImportPath, p.Error.Err))
			continue
		}
		exports[p.ImportPath] = p.Export
		if !p.DepOnly {
			targets = append(targets, p)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	var pkgs []Package
	for _, t := range targets {
		p := Package{Path: t.ImportPath, Dir: t.Dir}
		for _, name := range t.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(t.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, err
			}
			p.Files = append(p.Files, f)
		}
		p.Info = &types.Info{Types: make(map[ast.Expr]types.TypeAndValue), Uses: make(map[*ast.Ident]types.Object)}
		conf := types.Config{Importer: mappedImporter{imp, t.ImportMap}}
		if _, err := conf.Check(t.ImportPath, fset, p.Files, p.Info); err != nil {
			return nil, fmt.Errorf("type-check %s: %w", t.ImportPath, err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// mappedImporter resolves an import path as written to the package that
// the build uses (vendored standard-library packages, for one).
type mappedImporter struct {
	imp types.Importer
	m   map[string]string
}

func (m mappedImporter) Import(path string) (*types.Package, error) {
	if p, ok := m.m[path]; ok {
		path = p
	}
	return m.imp.Import(path)
}
