package archtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// layoutRow is a row of README.md's layout tables: its first cell is one
// path in backquotes.
var layoutRow = regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")

// TestReadmeLayoutMatchesTree: README.md's "Repository layout" names
// every Go package of the module in a row of its own, and every path it
// names exists.
func TestReadmeLayoutMatchesTree(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "### Repository layout")
	if start < 0 {
		t.Fatal(`README.md has no "### Repository layout" section`)
	}
	text = text[start+1:]
	if end := strings.Index(text, "\n#"); end >= 0 {
		text = text[:end]
	}
	rows := map[string]int{}
	for _, m := range layoutRow.FindAllStringSubmatch(text, -1) {
		rows[strings.TrimSuffix(m[1], "/")]++
	}
	if len(rows) < 10 {
		t.Fatalf("the layout section has %d rows: the table is not where the test looks", len(rows))
	}
	for path, n := range rows {
		if n > 1 {
			t.Errorf("README.md's layout names %s in %d rows, want one", path, n)
		}
		if _, err := os.Stat(filepath.Join(root, path)); err != nil {
			t.Errorf("README.md's layout names %s, which is not in the tree: %v", path, err)
		}
	}

	cmd := exec.Command("go", "list", "-f", "{{.Dir}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil || rel == "." {
			continue
		}
		if rows[filepath.ToSlash(rel)] == 0 {
			t.Errorf("package %s has no row of its own in README.md's layout", filepath.ToSlash(rel))
		}
	}
}
