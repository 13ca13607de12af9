package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xlbproject/xlb/testbed/netns"
	"github.com/xlbproject/xlb/testbed/router"
)

// embeddedProcess is the StartProcess name of the embedded router.
const embeddedProcess = "router"

// bgpPort is where the routers and the reflector accept BGP sessions.
const bgpPort = 179

// RouterSocket is the status socket of the embedded router (see
// router.ReadStatus).
func RouterSocket(prefix string) string { return filepath.Join(StateDir(prefix), "router.sock") }

// startRouter starts the BGP speakers of the upstream router the spec
// asks for and waits until they accept the nodes' sessions. The static
// router has none: its route is set by an earlier step.
func startRouter(ctx context.Context, p Plan) error {
	switch p.Spec.Router {
	case RouterEmbedded:
		return startEmbedded(ctx, p)
	case RouterFRR:
		// FRR first: it keeps trying to reach the reflector every
		// second, whereas gobgpd, once a session attempt fails (FRR
		// not configured yet), idles for 5 s and refuses incoming
		// connections in the meantime.
		if err := startFRR(ctx, p); err != nil {
			return err
		}
		if p.Reflector == nil {
			return nil
		}
		if err := startReflector(ctx, p); err != nil {
			return err
		}
		return waitFRRPeer(ctx, p, p.Reflector.Addr, reflectorReady)
	case RouterBIRD:
		return startBIRD(ctx, p)
	}
	return nil
}

// embeddedArgs is the command line of `xlb lab router` for plan p.
func embeddedArgs(p Plan) []string {
	gw := p.NodeSegment.Gateway().String()
	args := []string{p.Spec.Binary, "lab", "router",
		"--asn", strconv.Itoa(RouterASN),
		"--router-id", gw,
		"--listen", gw,
		"--neighbors", p.NodeSegment.Subnet.Masked().String(),
		"--peer-asn", strconv.FormatUint(uint64(p.BGP.NodeASN), 10),
		"--hold-time", p.BGP.HoldTime.String(),
		"--status", RouterSocket(p.Spec.Prefix),
	}
	if s6 := p.NodeSegment.Subnet6; s6.IsValid() {
		args = append(args, "--listen6", p.NodeSegment.Gateway6().String())
		i := slices.Index(args, "--neighbors") + 1
		args[i] += "," + s6.Masked().String()
	}
	if b := p.BGP.BFD; b != nil {
		args = append(args, "--bfd", fmt.Sprintf("%s,%s,%d", b.MinRx, b.MinTx, b.Multiplier))
	}
	return args
}

// startEmbedded runs `xlb lab router` in the router namespace and waits
// until it answers on its status socket and listens for BGP.
func startEmbedded(ctx context.Context, p Plan) error {
	args := embeddedArgs(p)
	if _, err := StartProcess(p.Spec.Prefix, p.Router, embeddedProcess, args...); err != nil {
		return err
	}
	return waitFor(ctx, readyTimeout, p.Spec.Prefix, embeddedProcess, func() (bool, error) {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := router.ReadStatus(sctx, RouterSocket(p.Spec.Prefix)); err != nil {
			return false, err
		}
		return listeningTCP(p.Router, bgpPort)
	})
}

// waitFor polls ready until it reports true, the process named proc
// (started by StartProcess) exits, or timeout passes. The error names
// the process's log and quotes its end.
func waitFor(ctx context.Context, timeout time.Duration, prefix, proc string, ready func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := ready()
		if ok {
			return nil
		}
		rec, rerr := readRecord(prefix, proc)
		switch {
		case rerr != nil || !ours(rec):
			return fmt.Errorf("%s exited; its log %s ends with: %s", proc, LogFile(prefix, proc), logTail(LogFile(prefix, proc)))
		case time.Now().After(deadline):
			if err == nil {
				err = errors.New("not ready")
			}
			return fmt.Errorf("%s not ready after %s: %w (see its log %s)", proc, timeout, err, LogFile(prefix, proc))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// listeningTCP reports whether some socket of namespace ns listens on
// TCP port. It reads the namespace's socket table instead of connecting:
// a connection from inside the node segment would look like a BGP
// neighbour to the speaker.
func listeningTCP(ns string, port int) (bool, error) {
	var found bool
	err := netns.Do(ns, func() error {
		// thread-self: /proc/self/net is the namespace of the main
		// thread, not of this one.
		f, err := os.Open("/proc/thread-self/net/tcp")
		if err != nil {
			return err
		}
		defer f.Close()
		found, err = listening(f, port)
		return err
	})
	return found, err
}

// listening scans a /proc/net/tcp table for a listening socket on port.
func listening(f *os.File, port int) (bool, error) {
	want := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st ...; st 0A is LISTEN.
		fields := strings.Fields(sc.Text())
		if len(fields) > 3 && strings.HasSuffix(fields[1], want) && fields[3] == "0A" {
			return true, nil
		}
	}
	return false, sc.Err()
}

// commandError adds a failed command's standard error to its error.
func commandError(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}

// sessions lists the BGP sessions of the lab's router and reflector.
func sessions(ctx context.Context, p Plan) ([]Session, error) {
	var all []Session
	var errs []error
	switch p.Spec.Router {
	case RouterEmbedded:
		st, err := router.ReadStatus(ctx, RouterSocket(p.Spec.Prefix))
		if err != nil {
			errs = append(errs, err)
		}
		for _, peer := range st.Peers {
			all = append(all, Session{Speaker: "router", Peer: peer.Address, ASN: peer.ASN, State: peer.State})
		}
	case RouterFRR:
		ss, err := frrSessions(ctx, p)
		if err != nil {
			errs = append(errs, err)
		}
		all = append(all, ss...)
	case RouterBIRD:
		ss, err := birdSessions(ctx, p)
		if err != nil {
			errs = append(errs, err)
		}
		all = append(all, ss...)
	}
	if p.Reflector != nil {
		ss, err := reflectorSessions(ctx, p)
		if err != nil {
			errs = append(errs, err)
		}
		all = append(all, ss...)
	}
	return all, errors.Join(errs...)
}
