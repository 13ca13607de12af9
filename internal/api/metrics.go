package api

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// The metrics are written in the Prometheus text exposition format
// (version 0.0.4) from a fresh Status on every scrape, so they can never
// disagree with `xlb status`. The format is small enough to write directly,
// and client_golang's own dependencies are not in go.sum; a custom
// client_golang Collector over the same StatusFunc could replace this file
// without changing the output.

// metricsContentType is the text format's media type.
const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

func metricsHandler(status StatusFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, err := status()
		if err != nil {
			// A scrape that fails is better than one that silently reports
			// zeros: Prometheus marks the target down (up == 0).
			http.Error(w, "collect xlb status: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", metricsContentType)
		writeMetrics(w, st)
	})
}

// family is one metric family: name, help, type and samples.
type family struct {
	name, help, typ string
	samples         []sample
}

type sample struct {
	labels []label
	value  string
}

type label struct{ name, value string }

func counter(v uint64) string { return strconv.FormatUint(v, 10) }

func families(st *Status) []family {
	build := family{"xlb_build_info", "Build information of the running agent; the value is always 1.", "gauge",
		[]sample{{[]label{{"version", st.Version}}, "1"}}}
	gen := family{"xlb_config_generation", "Number of configurations loaded since the agent started; 1 is the one it started with.", "gauge",
		[]sample{{nil, counter(st.Config.Generation)}}}
	ok := "0"
	if st.Config.Result == ResultOK {
		ok = "1"
	}
	lastOK := family{"xlb_config_last_reload_successful", "Whether the last configuration (re)load succeeded (1) or failed and the previous configuration is still running (0).", "gauge",
		[]sample{{nil, ok}}}
	lastTime := family{"xlb_config_last_reload_timestamp_seconds", "Time of the last configuration (re)load attempt, in seconds since the Unix epoch.", "gauge", nil}
	if !st.Config.LastReload.IsZero() {
		lastTime.samples = []sample{{nil, strconv.FormatFloat(float64(st.Config.LastReload.UnixMilli())/1000, 'f', -1, 64)}}
	}
	reloads := family{"xlb_config_reloads_total", "Configuration reloads after the start (file change or SIGHUP) by result.", "counter", nil}
	// Both results are always present, so rate() and alerts work from the
	// first scrape on.
	for _, r := range []string{ResultOK, ResultError} {
		reloads.samples = append(reloads.samples, sample{[]label{{"result", r}}, counter(st.Config.Reloads[r])})
	}

	svcPackets := family{"xlb_service_packets_total", "Packets the data plane forwarded for a service.", "counter", nil}
	svcBytes := family{"xlb_service_bytes_total", "Bytes the data plane forwarded for a service, before encapsulation.", "counter", nil}
	bePackets := family{"xlb_backend_packets_total", "Packets the data plane sent to a backend of a service.", "counter", nil}
	beBytes := family{"xlb_backend_bytes_total", "Bytes the data plane sent to a backend of a service, before encapsulation.", "counter", nil}
	for _, s := range st.Services {
		sl := []label{{"service", s.Name}}
		svcPackets.samples = append(svcPackets.samples, sample{sl, counter(s.Counters.Packets)})
		svcBytes.samples = append(svcBytes.samples, sample{sl, counter(s.Counters.Bytes)})
		for _, b := range s.Backends {
			bl := []label{{"service", s.Name}, {"backend", netip.AddrPortFrom(b.Address, b.Port).String()}}
			bePackets.samples = append(bePackets.samples, sample{bl, counter(b.Counters.Packets)})
			beBytes.samples = append(beBytes.samples, sample{bl, counter(b.Counters.Bytes)})
		}
	}
	reasons := family{"xlb_dataplane_reason_packets_total", "Packets the data plane passed to the kernel or dropped, by reason.", "counter", nil}
	for _, r := range slices.Sorted(maps.Keys(st.Reasons)) {
		reasons.samples = append(reasons.samples, sample{[]label{{"reason", r}}, counter(st.Reasons[r])})
	}

	fams := []family{build, gen, lastOK, lastTime, reloads, svcPackets, svcBytes, bePackets, beBytes, reasons}
	slices.SortFunc(fams, func(a, b family) int { return cmp.Compare(a.name, b.name) })
	return fams
}

func writeMetrics(w io.Writer, st *Status) error {
	bw := bufio.NewWriter(w)
	for _, f := range families(st) {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", f.name, escapeHelp(f.help), f.name, f.typ)
		for _, s := range f.samples {
			bw.WriteString(f.name)
			if len(s.labels) > 0 {
				bw.WriteByte('{')
				for i, l := range s.labels {
					if i > 0 {
						bw.WriteByte(',')
					}
					fmt.Fprintf(bw, "%s=\"%s\"", l.name, escapeLabel(l.value))
				}
				bw.WriteByte('}')
			}
			fmt.Fprintf(bw, " %s\n", s.value)
		}
	}
	return bw.Flush()
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
func escapeLabel(s string) string { return labelEscaper.Replace(s) }
