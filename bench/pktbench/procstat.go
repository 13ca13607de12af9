package main

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/xlbproject/xlb/testbed/labrun"
)

// userHZ is the unit of /proc/stat's CPU times (USER_HZ, 100 on every
// Linux architecture that matters here).
const userHZ = 100

// cpuTimes is one CPU's line of /proc/stat, in USER_HZ ticks.
type cpuTimes struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
}

// busy is everything but idle and iowait.
func (c cpuTimes) busy() uint64 {
	return c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
}

func (c cpuTimes) total() uint64 { return c.busy() + c.Idle + c.IOWait }

// sub is c − o field by field; a counter that went backwards (it does
// not, but a hot-plugged CPU would reset) counts as zero.
func (c cpuTimes) sub(o cpuTimes) cpuTimes {
	d := func(a, b uint64) uint64 {
		if a < b {
			return 0
		}
		return a - b
	}
	return cpuTimes{d(c.User, o.User), d(c.Nice, o.Nice), d(c.System, o.System), d(c.Idle, o.Idle),
		d(c.IOWait, o.IOWait), d(c.IRQ, o.IRQ), d(c.SoftIRQ, o.SoftIRQ), d(c.Steal, o.Steal)}
}

// parseProcStat reads the per-CPU lines of /proc/stat ("cpu0 …",
// "cpu1 …"), indexed by CPU number; the summary line "cpu" is skipped.
func parseProcStat(r io.Reader) (map[int]cpuTimes, error) {
	out := map[int]cpuTimes{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(f[0], "cpu"))
		if err != nil {
			continue
		}
		if len(f) < 9 {
			return nil, fmt.Errorf("/proc/stat: %s: %d fields, want at least 8 times", f[0], len(f)-1)
		}
		var v [8]uint64
		for i := range v {
			if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
				return nil, fmt.Errorf("/proc/stat: %s field %d: %w", f[0], i+1, err)
			}
		}
		out[n] = cpuTimes{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("/proc/stat: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("/proc/stat: no per-CPU lines")
	}
	return out, nil
}

// udpCounters are the UDP counters of a namespace's /proc/net/snmp that
// tell whether datagrams reached a socket.
type udpCounters struct {
	InDatagrams  uint64 // queued to a socket
	NoPorts      uint64 // no socket on the port
	InErrors     uint64
	RcvbufErrors uint64 // the socket's receive buffer was full: dropped at the socket
}

// delivered is every datagram the UDP layer took to a socket: queued, or
// dropped there because the (never read) buffer was full.
func (u udpCounters) delivered() uint64 { return u.InDatagrams + u.RcvbufErrors }

// ipCounters are the IPv4 counters of a namespace's /proc/net/snmp that
// say what a router or node did with packets.
type ipCounters struct {
	InReceives, ForwDatagrams, InDiscards, OutDiscards, OutNoRoutes uint64
}

// snmp is what parseSNMP reads.
type snmp struct {
	IP  ipCounters
	UDP udpCounters
}

// parseSNMP reads the Ip and Udp counters of /proc/net/snmp.
func parseSNMP(r io.Reader) (snmp, error) {
	var s snmp
	err := labrun.ParseSNMP(r, map[string]*uint64{
		"Ip.InReceives": &s.IP.InReceives, "Ip.ForwDatagrams": &s.IP.ForwDatagrams,
		"Ip.InDiscards": &s.IP.InDiscards, "Ip.OutDiscards": &s.IP.OutDiscards, "Ip.OutNoRoutes": &s.IP.OutNoRoutes,
		"Udp.InDatagrams": &s.UDP.InDatagrams, "Udp.NoPorts": &s.UDP.NoPorts,
		"Udp.InErrors": &s.UDP.InErrors, "Udp.RcvbufErrors": &s.UDP.RcvbufErrors,
	})
	return s, err
}

// parseSchedstat reads /proc/PID/schedstat: the first field is the time
// the task has run on a CPU, in nanoseconds.
func parseSchedstat(b []byte) (uint64, error) {
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("schedstat: empty")
	}
	v, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("schedstat: %w", err)
	}
	return v, nil
}
