package main

import (
	"strings"
	"time"
)

// agentLog holds the moments of one agent run that the breakdown of a
// scale event needs, from the agent's text log; zero when not logged.
type agentLog struct {
	speakerStarted time.Time // "bgp speaker started": the embedded GoBGP runs, its peer added
	peerUp         time.Time // "bgp peer up": the session is established
	withdrawn      time.Time // "bgp routes withdrawn": SIGTERM's withdrawal is sent
	bfdUp          time.Time // "BFD session state changed" to Up
}

// The messages parseAgentLog looks for (internal/bgp's log lines).
const (
	msgSpeakerStarted = "bgp speaker started"
	msgPeerUp         = "bgp peer up"
	msgWithdrawn      = "bgp routes withdrawn"
	msgBFDState       = "BFD session state changed" // with to=Up
)

// parseAgentLog reads the log of one agent run: text that starts where
// the run's output starts and may go on into the next run's, which
// begins with lab.StartProcess's "--- " header. The first line may be
// this run's own header. The first occurrence of each message counts.
func parseAgentLog(text string) agentLog {
	var lg agentLog
	first := true
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "--- ") {
			if !first {
				break // the next run
			}
			first = false
			continue
		}
		first = false
		t, msg, ok := logLine(line)
		if !ok {
			continue
		}
		var dst *time.Time
		switch msg {
		case msgSpeakerStarted:
			dst = &lg.speakerStarted
		case msgPeerUp:
			dst = &lg.peerUp
		case msgWithdrawn:
			dst = &lg.withdrawn
		case msgBFDState:
			if !strings.Contains(line, " to=Up") {
				continue
			}
			dst = &lg.bfdUp
		default:
			continue
		}
		if dst.IsZero() {
			*dst = t
		}
	}
	return lg
}

// logLine splits a log/slog text line into its time and message.
func logLine(line string) (time.Time, string, bool) {
	rest, ok := strings.CutPrefix(line, "time=")
	if !ok {
		return time.Time{}, "", false
	}
	stamp, rest, ok := strings.Cut(rest, " ")
	if !ok {
		return time.Time{}, "", false
	}
	t, err := time.Parse(time.RFC3339Nano, stamp)
	if err != nil {
		return time.Time{}, "", false
	}
	_, rest, ok = strings.Cut(rest, " msg=")
	if !ok {
		return time.Time{}, "", false
	}
	var msg string
	if strings.HasPrefix(rest, `"`) {
		msg, _, _ = strings.Cut(rest[1:], `"`)
	} else {
		msg, _, _ = strings.Cut(strings.TrimSpace(rest), " ")
	}
	return t, msg, true
}
