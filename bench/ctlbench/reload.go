package main

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"syscall"
	"time"

	"github.com/xlbproject/xlb/bench/internal/benchutil"
)

// agentFilePoll is how often the agent compares its configuration file's
// stat (internal/agent's Agent.pollEvery): the longest a write can wait
// when nothing else tells the agent of it. The file mode's pauses are
// random over it, so that its samples spread over the poll's phase.
const agentFilePoll = 500 * time.Millisecond

// Reload trigger modes measured.
const (
	modeFile   = "file"   // write the file and wait for the agent to notice
	modeSIGHUP = "sighup" // write the file, then send SIGHUP
)

// ReloadResult is the config write → data plane measurement.
type ReloadResult struct {
	// FilePollMs is the agent's stat poll period: the file mode's
	// expected extra delay is uniform in [0, FilePollMs).
	FilePollMs float64      `json:"agent_file_poll_ms"`
	PollMs     float64      `json:"table_poll_ms"`
	Modes      []ReloadMode `json:"modes"`
}

// ReloadMode is one trigger's measurement.
type ReloadMode struct {
	Mode string `json:"mode"`
	// What triggered the agent's reloads during the run, from its log
	// ("file changed", "SIGHUP").
	Triggers     map[string]int    `json:"agent_triggers"`
	Update       benchutil.Summary `json:"update"`
	SamplesMs    []float64         `json:"samples_ms"`
	OtherChanges int               `json:"other_changes"`
}

// runReload flips the weight of the service's first backend between 1
// and 2, n times per mode, and times each write until the agent's table
// reflects it.
func runReload(ctx context.Context, l *benchLab, n int, progress func(string)) (*ReloadResult, error) {
	res := &ReloadResult{FilePollMs: benchutil.Ms(agentFilePoll), PollMs: benchutil.Ms(tablePoll)}
	for _, mode := range []string{modeFile, modeSIGHUP} {
		before, err := l.reloadTriggers()
		if err != nil {
			return nil, err
		}
		m := ReloadMode{Mode: mode}
		for i := range n {
			d, others, err := reloadOnce(ctx, l, mode)
			if err != nil {
				return nil, fmt.Errorf("%s event %d: %w", mode, i+1, err)
			}
			m.SamplesMs = append(m.SamplesMs, d)
			m.OtherChanges += others
			if (i+1)%20 == 0 || i+1 == n {
				progress(fmt.Sprintf("reload (%s): %d/%d events, last %.1f ms", mode, i+1, n, d))
			}
			// File writes at a random phase of the agent's poll.
			pause := 50*time.Millisecond + rand.N(100*time.Millisecond)
			if mode == modeFile {
				pause = 50*time.Millisecond + rand.N(agentFilePoll)
			}
			if err := benchutil.Sleep(ctx, pause); err != nil {
				return nil, err
			}
		}
		after, err := l.reloadTriggers()
		if err != nil {
			return nil, err
		}
		m.Triggers = map[string]int{}
		for k := range maps.Keys(after) {
			if d := after[k] - before[k]; d > 0 {
				m.Triggers[k] = d
			}
		}
		m.Update = benchutil.Summarize(m.SamplesMs)
		res.Modes = append(res.Modes, m)
	}
	return res, nil
}

// reloadOnce flips the first backend's weight, writes the file (and, in
// SIGHUP mode, signals the agent), and waits until the table gives that
// backend more slots (weight 2) or fewer (weight 1) than before.
func reloadOnce(ctx context.Context, l *benchLab, mode string) (float64, int, error) {
	before, slots, err := l.currentTable()
	if err != nil {
		return 0, 0, err
	}
	be := l.svc.Backends[0]
	was := slots[be]
	l.weights[0] = 3 - l.weights[0]
	heavier := l.weights[0] == 2
	t0, err := l.writeConfig()
	if err != nil {
		return 0, 0, err
	}
	if mode == modeSIGHUP {
		if err := syscall.Kill(l.agent, syscall.SIGHUP); err != nil {
			return 0, 0, fmt.Errorf("SIGHUP to the agent (PID %d): %w", l.agent, err)
		}
	}
	moved := func(s map[netip.Addr]int) bool {
		if heavier {
			return s[be] > was
		}
		return s[be] < was
	}
	t1, _, others, err := l.waitTable(ctx, before, moved)
	if err != nil {
		return 0, others, fmt.Errorf("weight %d for %s: %w", l.weights[0], be, err)
	}
	return benchutil.Ms(t1.Sub(t0)), others, nil
}
