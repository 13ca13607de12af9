package benchutil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// StampLayout names the dated result files.
const StampLayout = "20060102-150405"

// WriteJSON writes v, indented, to dir/<name>-<stamp>.json and
// dir/<name>-latest.json and returns the first path.
func WriteJSON(dir, name, stamp string, v any) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name+"-"+stamp+".json")
	for _, p := range []string{path, filepath.Join(dir, name+"-latest.json")} {
		if err := os.WriteFile(p, append(data, '\n'), 0o644); err != nil {
			return "", err
		}
	}
	return path, nil
}

// CheckSection says whether section is one that ReplaceSection can put
// into a document and find again: it starts with begin, ends with end,
// and has neither marker anywhere else.
func CheckSection(section, begin, end string) error {
	if !strings.HasPrefix(section, begin) || !strings.HasSuffix(section, end) ||
		strings.Count(section, begin) != 1 || strings.Count(section, end) != 1 {
		return fmt.Errorf("the generated section does not start with %q and end with %q, each once (a bug in the program that wrote it)", begin, end)
	}
	return nil
}

// ReplaceSection returns doc with the text from begin to end (both
// included) replaced by section, which must carry both markers itself
// (CheckSection). A document without either marker gets section
// appended. A document with only one, or with them out of order or
// repeated, is an error: rewriting it could destroy text someone wrote.
func ReplaceSection(doc, begin, end, section string) (string, error) {
	if err := CheckSection(section, begin, end); err != nil {
		return "", err
	}
	nb, ne := strings.Count(doc, begin), strings.Count(doc, end)
	if nb == 0 && ne == 0 {
		sep := "\n"
		if doc != "" && !strings.HasSuffix(doc, "\n") {
			sep = "\n\n"
		} else if doc == "" {
			sep = ""
		}
		return doc + sep + section, nil
	}
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if nb != 1 || ne != 1 || j < i {
		return "", fmt.Errorf("want one %q followed by one %q; found %d and %d%s", begin, end, nb, ne,
			map[bool]string{true: ", the end first"}[nb == 1 && ne == 1 && j < i])
	}
	return doc[:i] + section + doc[j+len(end):], nil
}

// RewriteDoc puts section, delimited by begin and end, into the document
// at path (see ReplaceSection).
func RewriteDoc(path, begin, end, section string) error {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	out, err := ReplaceSection(string(b), begin, end, section)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(out), 0o644)
}

// Interruptible returns a context that ends on SIGINT, SIGTERM or
// SIGHUP, after which a second one kills at once (the next run cleans
// up), and on SIGPIPE: output piped into a pager that quits must neither
// kill the run before it cleans up nor let it go on for minutes. SIGPIPE
// stays caught, so that writes to the closed output only fail. name
// prefixes the message printed on a signal.
func Interruptible(name string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	stops := []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}
	sigs, pipe := make(chan os.Signal, 1), make(chan os.Signal, 1)
	signal.Notify(sigs, stops...)
	signal.Notify(pipe, syscall.SIGPIPE)
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(os.Stderr, "%s: %v: cleaning up (again to kill at once)\n", name, s)
			signal.Reset(stops...)
		case <-pipe:
		case <-ctx.Done():
			signal.Reset(stops...)
		}
		cancel()
	}()
	return ctx, cancel
}

// Running reports whether process pid exists and has not exited: a
// killed run stays a zombie until its parent reaps it.
func Running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

// StaleRuns returns, sorted, the PIDs of earlier runs that are gone but
// left entries named <prefix><PID> or <prefix><PID>-… in dirs: what a
// run that was killed before it could clean up leaves behind. The
// calling process is never among them.
func StaleRuns(prefix string, dirs ...string) []int {
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `([0-9]+)(?:-.*)?$`)
	gone := map[int]bool{}
	for _, dir := range dirs {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			m := re.FindStringSubmatch(e.Name())
			if m == nil {
				continue
			}
			pid, err := strconv.Atoi(m[1])
			if err != nil || pid == os.Getpid() || Running(pid) {
				continue
			}
			gone[pid] = true
		}
	}
	return slices.Sorted(maps.Keys(gone))
}
