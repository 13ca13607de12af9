package config

import (
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParse checks that Parse never panics, that every error line names
// the file, and that whatever it accepts satisfies the invariants the rest
// of the agent relies on. Run it with: go test -fuzz FuzzParse ./internal/config/
func FuzzParse(f *testing.F) {
	full, err := os.ReadFile(filepath.Join("testdata", "full.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	seeds := []string{
		string(full),
		minimal,
		"node: {interface: eth0}\n",
		"node: {interface: eth0}\nservices:\n  - &s {name: a, vip: 10.99.0.1, port: 53, protocol: udp, backends: &b [{address: 10.0.3.2, weight: 0}, {address: 10.0.3.3}]}\n  - {<<: *s, name: b, protocol: tcp, forwarding: dsr-gue}\n",
		"node: {interface: eth0, address: 10.0.1.2}\napi: {socket: /run/x.sock, metrics: \"[::1]:9400\"}\ndataplane: {pinPath: /sys/fs/bpf/x, attachMode: generic, tableSize: 251}\n",
		"node:\n  interfce: eth0\nbgp: {asn: 1}\n",
		"node: {interface: eth0}\nservices:\n  - name: a\n    vip: 10.99.0.1\n    port: 80\n    healthCheck: {type: http, path: /h, expectStatus: \"200-204\", interval: 200ms, timeout: 150ms, rise: 1, fall: 3}\n    backends: [{address: 10.0.3.2, healthCheck: {type: tcp, port: 22}}, {address: 10.0.3.3, healthCheck: {interval: 1s}}]\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("f.yaml", data)
		if err != nil {
			if cfg != nil {
				t.Fatalf("got a config together with the error %v", err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "f.yaml:") {
					t.Fatalf("error line %q does not start with the file name", line)
				}
			}
			return
		}
		if err := invariants(cfg); err != nil {
			t.Fatalf("%v\ninput:\n%s", err, data)
		}
	})
}

var serviceName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// invariants re-checks a parsed configuration independently of the parser's
// own code: what Parse accepts, the data plane must be able to take.
func invariants(c *Config) error {
	if c == nil {
		return errors.New("nil config without an error")
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	ifname := c.Node.Interface
	if len(ifname) < 1 || len(ifname) > 15 || ifname == "." || ifname == ".." || strings.ContainsAny(ifname, "/: \t\n\v\f\r\x00") {
		bad("invalid interface %q", ifname)
	}
	if a := c.Node.Address; a.IsValid() && !unicast4(a) {
		bad("invalid node address %v", a)
	}
	if !strings.HasPrefix(c.API.Socket, "/") || len(c.API.Socket) > 107 {
		bad("invalid socket %q", c.API.Socket)
	}
	if m := c.API.Metrics; m != "" {
		host, port, err := net.SplitHostPort(m)
		n, perr := strconv.Atoi(port)
		_, herr := netip.ParseAddr(host)
		if err != nil || perr != nil || n < 1 || n > 65535 || host != "" && host != "localhost" && herr != nil {
			bad("invalid metrics address %q", m)
		}
	}
	dp := c.Dataplane
	if dp.PinPath != "" && !strings.HasPrefix(dp.PinPath, "/") {
		bad("invalid pin path %q", dp.PinPath)
	}
	if dp.AttachMode != "auto" && dp.AttachMode != "native" && dp.AttachMode != "generic" {
		bad("invalid attach mode %q", dp.AttachMode)
	}
	if dp.TableSize < MinTableSize || dp.TableSize > MaxTableSize || !big.NewInt(int64(dp.TableSize)).ProbablyPrime(20) {
		bad("invalid table size %d", dp.TableSize)
	}

	if len(c.Services) > MaxServices {
		bad("%d services", len(c.Services))
	}
	names := map[string]bool{}
	keys := map[Key]bool{}
	total := 0
	for i, s := range c.Services {
		if len(s.Name) > 63 || !serviceName.MatchString(s.Name) || names[s.Name] {
			bad("services[%d]: invalid or duplicate name %q", i, s.Name)
		}
		names[s.Name] = true
		if !unicast4(s.VIP) || s.Port == 0 || (s.Protocol != TCP && s.Protocol != UDP) || (s.Forwarding != DSRIPIP && s.Forwarding != DSRGUE) {
			bad("services[%d]: invalid %+v", i, s)
		}
		if keys[s.Key()] {
			bad("services[%d]: duplicate key %v", i, s.Key())
		}
		keys[s.Key()] = true
		if len(s.Backends) == 0 || uint32(len(s.Backends)) >= dp.TableSize {
			bad("services[%d]: %d backends for a table of %d", i, len(s.Backends), dp.TableSize)
		}
		total += len(s.Backends)
		addrs := map[netip.Addr]bool{}
		active := false
		for j, b := range s.Backends {
			if !unicast4(b.Address) || addrs[b.Address] || b.Port != s.Port || b.Weight > 65535 {
				bad("services[%d].backends[%d]: invalid or duplicate %+v", i, j, b)
			}
			addrs[b.Address] = true
			active = active || b.Weight > 0
			if err := checkInvariants(b.HealthCheck); err != nil {
				bad("services[%d].backends[%d]: %v", i, j, err)
			}
		}
		if !active {
			bad("services[%d]: no backend with weight > 0", i)
		}
	}
	if total > int(c.Dataplane.MaxBackends) {
		bad("%d backends", total)
	}
	return errors.Join(errs...)
}

// checkInvariants re-checks a resolved health check: the prober relies on
// these.
func checkInvariants(hc HealthCheck) error {
	switch hc.Type {
	case CheckNone:
		if hc != (HealthCheck{Type: CheckNone}) {
			return fmt.Errorf("type none with other fields set: %+v", hc)
		}
		return nil
	case CheckTCP:
		if hc.Path != "" || hc.StatusMin != 0 || hc.StatusMax != 0 {
			return fmt.Errorf("tcp check with http fields: %+v", hc)
		}
	case CheckHTTP:
		if !strings.HasPrefix(hc.Path, "/") || len(hc.Path) > 1024 || strings.ContainsFunc(hc.Path, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
			return fmt.Errorf("invalid http path %q", hc.Path)
		}
		if hc.StatusMin < 100 || hc.StatusMin > hc.StatusMax || hc.StatusMax > 599 {
			return fmt.Errorf("invalid status range %d-%d", hc.StatusMin, hc.StatusMax)
		}
	default:
		return fmt.Errorf("invalid check type %q", hc.Type)
	}
	if hc.Port == 0 || hc.Interval < 10*time.Millisecond || hc.Interval > time.Hour ||
		hc.Timeout <= 0 || hc.Timeout > hc.Interval || hc.Rise < 1 || hc.Rise > 100 || hc.Fall < 1 || hc.Fall > 100 {
		return fmt.Errorf("invalid check %+v", hc)
	}
	return nil
}

func unicast4(a netip.Addr) bool {
	if !a.Is4() {
		return false
	}
	b := a.As4()
	return b != [4]byte{} && b != [4]byte{255, 255, 255, 255} &&
		b[0] != 127 && b[0]&0xf0 != 0xe0
}
