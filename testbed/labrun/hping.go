package labrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// Flood is what HPingFlood sent.
type Flood struct {
	Command   string        // the command line, as run in the namespace
	Packets   uint64        // frames the client's interface sent meanwhile
	Took      time.Duration // from hping3's start to its end
	Output    string        // the end of hping3's output
	Unstopped bool          // hping3 outlived its timeout and was killed by PID
}

// Rate is the flood's rate in packets per second.
func (f Flood) Rate() float64 {
	if f.Took <= 0 {
		return 0
	}
	return float64(f.Packets) / f.Took.Seconds()
}

// hpingGrace is how long HPingFlood waits beyond its duration before it
// kills hping3 by PID.
const hpingGrace = 3 * time.Second

// HPingFlood runs `hping3 -S --flood --rand-source -p PORT ADDR` against
// target from client (a lab host) for about d, as fast as hping3 and
// this machine go: TCP SYNs from random sources and ports, which no host
// answers. `timeout` ends it (SIGINT, so hping3 prints its count); if it
// still runs hpingGrace later, it is killed by its PID. The rate is
// measured from the client interface's transmit counter, which counts
// every frame that left, rather than taken from hping3, which counts the
// ones it tried to send.
func HPingFlood(ctx context.Context, client lab.Host, target netip.AddrPort, d time.Duration) (Flood, error) {
	if _, err := exec.LookPath("hping3"); err != nil {
		return Flood{}, fmt.Errorf("hping3: %w (install it: `make deps`)", err)
	}
	secs := max(1, int(d.Round(time.Second)/time.Second))
	argv := []string{"timeout", "-s", "INT", strconv.Itoa(secs), "hping3", "-S", "--flood", "--rand-source", "-p", strconv.Itoa(int(target.Port())), target.Addr().String()}
	f := Flood{Command: strings.Join(argv, " ")}
	before, err := ReadLink(client.Namespace, client.Interface)
	if err != nil {
		return f, err
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", client.Namespace}, argv...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group, so that the kill below reaches timeout and
	// hping3 both, and nothing else.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	// It dies with this process, whatever ends it.
	done, err := testenv.StartTied(cmd)
	if err != nil {
		return f, fmt.Errorf("%s in %s: %w", f.Command, client.Namespace, err)
	}
	var waitErr error
	select {
	case waitErr = <-done:
	case <-time.After(time.Duration(secs)*time.Second + hpingGrace):
		f.Unstopped = true
	case <-ctx.Done():
	}
	if f.Unstopped || ctx.Err() != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		waitErr = <-done
	}
	f.Took = time.Since(start)
	after, err := ReadLink(client.Namespace, client.Interface)
	if err != nil {
		return f, err
	}
	f.Packets = delta(after.TxPackets, before.TxPackets)
	f.Output = lastLines(out.String(), 4)
	if err := ctx.Err(); err != nil {
		return f, context.Cause(ctx)
	}
	// timeout exits 124 when it had to end hping3; hping3 itself exits 0
	// on SIGINT. Anything else is a failure to flood.
	var exit *exec.ExitError
	if waitErr != nil && !(errors.As(waitErr, &exit) && exit.ExitCode() == 124) && !f.Unstopped {
		return f, fmt.Errorf("%s in %s: %w: %s", f.Command, client.Namespace, waitErr, f.Output)
	}
	return f, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
