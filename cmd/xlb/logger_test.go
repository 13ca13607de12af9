package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// capture points *stream (os.Stdout or os.Stderr) at a file for the
// rest of the test and returns a function that reads what was written.
func capture(t *testing.T, stream **os.File) func() string {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	old := *stream
	*stream = f
	t.Cleanup(func() {
		*stream = old
		f.Close()
	})
	return func() string {
		b, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
}

func TestNewLoggerJSON(t *testing.T) {
	read := capture(t, &os.Stderr)
	log, err := newLogger("json", "warn")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("debug line")
	log.Info("info line")
	log.Warn("warn line", "service", "web", "fix", "do this")
	log.Error("error line", "n", 3)

	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(read()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	// --log-level warn: the debug and info lines are filtered out.
	if len(lines) != 2 {
		t.Fatalf("%d lines, want the warn and error ones: %v", len(lines), lines)
	}
	for i, want := range []struct{ level, msg string }{{"WARN", "warn line"}, {"ERROR", "error line"}} {
		if lines[i]["level"] != want.level || lines[i]["msg"] != want.msg {
			t.Errorf("line %d: level %v msg %v, want %s %q", i, lines[i]["level"], lines[i]["msg"], want.level, want.msg)
		}
		if _, ok := lines[i]["time"]; !ok {
			t.Errorf("line %d has no time: %v", i, lines[i])
		}
	}
	if lines[0]["service"] != "web" || lines[0]["fix"] != "do this" || lines[1]["n"] != 3.0 {
		t.Errorf("attributes lost: %v", lines)
	}
}

func TestNewLoggerText(t *testing.T) {
	read := capture(t, &os.Stderr)
	log, err := newLogger("text", "debug")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("debug line", "service", "web")
	out := read()
	if !strings.Contains(out, `level=DEBUG msg="debug line" service=web`) {
		t.Errorf("text output %q, want a logfmt line at level DEBUG", out)
	}
	if strings.HasPrefix(strings.TrimSpace(out), "{") {
		t.Errorf("text output is JSON: %q", out)
	}
}

func TestNewLoggerLevels(t *testing.T) {
	for _, tc := range []struct {
		level          string
		debug, info    bool
		warn, errorLvl bool
	}{
		{"debug", true, true, true, true},
		{"info", false, true, true, true},
		{"INFO", false, true, true, true},
		{"warn", false, false, true, true},
		{"error", false, false, false, true},
	} {
		t.Run(tc.level, func(t *testing.T) {
			read := capture(t, &os.Stderr)
			log, err := newLogger("json", tc.level)
			if err != nil {
				t.Fatal(err)
			}
			log.Debug("d")
			log.Info("i")
			log.Warn("w")
			log.Error("e")
			out := read()
			for msg, want := range map[string]bool{"d": tc.debug, "i": tc.info, "w": tc.warn, "e": tc.errorLvl} {
				if got := strings.Contains(out, `"msg":"`+msg+`"`); got != want {
					t.Errorf("message %q logged: %v, want %v\n%s", msg, got, want, out)
				}
			}
		})
	}
}

func TestNewLoggerErrors(t *testing.T) {
	for _, tc := range []struct{ format, level, want string }{
		{"yaml", "info", `--log-format "yaml": want text or json`},
		{"", "info", `--log-format "": want text or json`},
		{"JSON", "info", `--log-format "JSON": want text or json`},
		{"json", "verbose", `--log-level "verbose": want debug, info, warn or error`},
		{"text", "", `--log-level "": want debug, info, warn or error`},
		// Both wrong: the level is reported.
		{"yaml", "loud", `--log-level "loud": want debug, info, warn or error`},
	} {
		log, err := newLogger(tc.format, tc.level)
		if err == nil || err.Error() != tc.want {
			t.Errorf("newLogger(%q, %q) = %v, %v; want the error %q", tc.format, tc.level, log, err, tc.want)
		}
	}
}

// TestAgentLogFlags: xlb agent reads its --log-* flags into newLogger and
// stops on a bad value before it touches anything else (the configuration
// file here does not exist).
func TestAgentLogFlags(t *testing.T) {
	capture(t, &os.Stderr)
	missing := filepath.Join(t.TempDir(), "agent.yaml")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", missing, "--log-format", "xml"}, `--log-format "xml": want text or json`},
		{[]string{"--config", missing, "--log-level", "trace"}, `--log-level "trace": want debug, info, warn or error`},
		{[]string{"--config", missing, "--log-format", "json", "--log-level", "debug"}, missing},
	} {
		err := runAgent(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("xlb agent %s: %v, want an error containing %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
