package benchutil

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReplaceSection(t *testing.T) {
	const (
		b   = "<!-- s:begin -->"
		e   = "<!-- s:end -->"
		sec = b + "\nnew\n" + e
	)
	tests := []struct {
		name, doc, want, err string
	}{
		{"replaces between the markers, keeps the rest",
			"# T\n\nintro\n" + b + "\nold\nlines\n" + e + "\n\nafter\n",
			"# T\n\nintro\n" + sec + "\n\nafter\n", ""},
		{"appends to a document without markers",
			"# T\n\ntext\n", "# T\n\ntext\n\n" + sec, ""},
		{"appends after a last line without newline",
			"# T", "# T\n\n" + sec, ""},
		{"an empty document becomes the section", "", sec, ""},
		{"leaves another tool's section alone",
			"<!-- lbbench:begin -->\nx\n<!-- lbbench:end -->\n" + b + "old" + e + "\n",
			"<!-- lbbench:begin -->\nx\n<!-- lbbench:end -->\n" + sec + "\n", ""},
		{"a begin without end is an error", "a\n" + b + "\nold\n", "", "found 1 and 0"},
		{"an end without begin is an error", "a\n" + e + "\n", "", "found 0 and 1"},
		{"markers out of order are an error", e + "\n" + b + "\n", "", "the end first"},
		{"two sections are an error", b + e + b + e, "", "found 2 and 2"},
	}
	for _, tc := range tests {
		got, err := ReplaceSection(tc.doc, b, e, sec)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case got != tc.want:
			t.Errorf("%s:\ngot  %q\nwant %q", tc.name, got, tc.want)
		}
	}
	if _, err := ReplaceSection("# T\n", b, e, "new\n"+e); err == nil || !strings.Contains(err.Error(), "does not start with") {
		t.Errorf("a section without its begin marker: err %v", err)
	}
}

func TestCheckSection(t *testing.T) {
	const b, e = "<!-- s:begin -->", "<!-- s:end -->"
	for _, tc := range []struct {
		section string
		ok      bool
	}{
		{b + "\n## S\n\ntext\n" + e, true},
		{b + e, true},
		{"\n" + b + "\ntext\n" + e, false}, // text before the begin marker would stay behind
		{b + "\ntext\n" + e + "\n", false},
		{b + "\ntext\n", false},
		{b + "\n" + e + "\n" + b + "\n" + e, false},
		{b + "\nsee " + b + "\n" + e, false},
	} {
		if err := CheckSection(tc.section, b, e); (err == nil) != tc.ok {
			t.Errorf("CheckSection(%q) = %v, want ok %v", tc.section, err, tc.ok)
		}
	}
}

// TestRewriteDoc: rewriting twice gives the same document, the text
// around the section survives, and a missing file is created.
func TestRewriteDoc(t *testing.T) {
	const b, e = "<!-- x:begin -->", "<!-- x:end -->"
	path := filepath.Join(t.TempDir(), "doc.md")
	if err := RewriteDoc(path, b, e, b+"\nfirst\n"+e); err != nil {
		t.Fatal(err)
	}
	head := "# Doc\n\n<!-- y:begin -->\nother\n<!-- y:end -->\n\n"
	got, _ := os.ReadFile(path)
	if err := os.WriteFile(path, []byte(head+string(got)+"\n\ntail\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := RewriteDoc(path, b, e, b+"\nsecond\n"+e); err != nil {
			t.Fatal(err)
		}
	}
	got, _ = os.ReadFile(path)
	if want := head + b + "\nsecond\n" + e + "\n\ntail\n"; string(got) != want {
		t.Errorf("document:\ngot  %q\nwant %q", got, want)
	}
}

func TestWriteJSON(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "results")
	v := map[string]int{"n": 3}
	path, err := WriteJSON(dir, "bgp", "20260101-000000", v)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "bgp-20260101-000000.json"); path != want {
		t.Errorf("path %s, want %s", path, want)
	}
	for _, p := range []string{path, filepath.Join(dir, "bgp-latest.json")} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]int
		if err := json.Unmarshal(b, &got); err != nil || got["n"] != 3 || !strings.HasSuffix(string(b), "}\n") {
			t.Errorf("%s: %q (%v)", p, b, err)
		}
	}
}
