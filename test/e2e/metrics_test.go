package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/testbed/lab"
	"github.com/xlbproject/xlb/testbed/labrun"
	"github.com/xlbproject/xlb/testbed/netns"
)

// metricsAddr is where the metrics test's agent serves Prometheus, inside
// its node's namespace.
const metricsAddr = "127.0.0.1:9400"

// scrape is one scrape of the metrics endpoint: every sample by its
// series as written ("name{label="value",...}") and the HELP of every
// metric family.
type scrape struct {
	samples map[string]float64
	help    map[string]string
}

// parseScrape reads the Prometheus text format, enough of it for the
// agent's metrics: no timestamps, no escaped quotes in label values.
func parseScrape(r io.Reader) (scrape, error) {
	s := scrape{samples: map[string]float64{}, help: map[string]string{}}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, text, _ := strings.Cut(rest, " ")
			s.help[name] = text
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return s, fmt.Errorf("metrics line %q: no value", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return s, fmt.Errorf("metrics line %q: %w", line, err)
		}
		s.samples[line[:i]] = v
	}
	return s, sc.Err()
}

// series writes a series as the text format does: labels sorted by
// name, which the caller passes them in.
func series(name string, labels ...string) string {
	if len(labels) == 0 {
		return name
	}
	var parts []string
	for i := 0; i+1 < len(labels); i += 2 {
		parts = append(parts, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// scrapeNode fetches GET /metrics from metricsAddr inside node's
// namespace. The connection is made there, on a locked thread; the
// request then goes over it from any thread.
func scrapeNode(node lab.Host) (scrape, error) {
	var conn net.Conn
	err := netns.Do(node.Namespace, func() error {
		var err error
		conn, err = net.DialTimeout("tcp4", metricsAddr, 2*time.Second)
		return err
	})
	if err != nil {
		return scrape{}, fmt.Errorf("%s: connect to the metrics endpoint %s: %w", node.Name, metricsAddr, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return scrape{}, err
	}
	if _, err := io.WriteString(conn, "GET /metrics HTTP/1.1\r\nHost: "+metricsAddr+"\r\nConnection: close\r\n\r\n"); err != nil {
		return scrape{}, fmt.Errorf("%s: GET /metrics: %w", node.Name, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return scrape{}, fmt.Errorf("%s: GET /metrics: %w", node.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return scrape{}, fmt.Errorf("%s: GET /metrics: status %s", node.Name, resp.Status)
	}
	s, err := parseScrape(resp.Body)
	if err != nil {
		return s, fmt.Errorf("%s: GET /metrics: %w", node.Name, err)
	}
	return s, nil
}

// withMetrics returns configuration file b with api.metrics set to addr.
func withMetrics(b []byte, addr string) ([]byte, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	apiSection, ok := doc["api"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("configuration without an api section:\n%s", b)
	}
	apiSection["metrics"] = addr
	return yaml.Marshal(doc)
}

// testMetrics restarts the first node's agent with a metrics endpoint,
// sends traffic through that node only, and checks what a scrape shows:
// the metric names with their HELP and labels, and service counters that
// grow by at least what the client sent.
func (e *env) testMetrics(t *testing.T) {
	ctx := testCtx(t)
	node := e.p.Nodes[0]
	t.Cleanup(func() {
		// Back to the configuration without metrics, and traffic over
		// both nodes.
		if err := lab.SetNodes(e.p.Spec.Prefix, []int{1, 2}); err != nil {
			t.Errorf("restore the route over both nodes: %v", err)
		}
		if _, err := api.GetStatus(labrun.Socket(e.p, node)); err == nil {
			e.stopAgent(t, node, syscall.SIGTERM)
		}
		if err := labrun.WriteConfig(e.p, node, e.services); err != nil {
			t.Error(err)
		}
		e.ensureAgents(t)
	})

	path := labrun.ConfigPath(e.p, node)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err = withMetrics(b, metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	// The metrics listener is set up at start only: restart the agent.
	e.stopAgent(t, node, syscall.SIGTERM)
	if err := writeFile(path, b); err != nil {
		t.Fatal(err)
	}
	if _, err := labrun.StartAgent(ctx, e.p, node, e.services); err != nil {
		t.Fatal(err)
	}
	// Only this node forwards, so its counters see every packet.
	if err := lab.SetNodes(e.p.Spec.Prefix, []int{1}); err != nil {
		t.Fatal(err)
	}
	e.quiet(t)

	first, err := scrapeNode(node)
	if err != nil {
		t.Fatal(err)
	}
	web := e.web().Name
	st, err := api.GetStatus(labrun.Socket(e.p, node))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		series("xlb_service_packets_total", "service", web),
		series("xlb_service_bytes_total", "service", web),
		series("xlb_config_reloads_total", "result", api.ResultOK),
		series("xlb_config_reloads_total", "result", api.ResultError),
		series("xlb_config_generation"),
	}
	for _, b := range serviceNamed(st, web).Backends {
		be := fmt.Sprintf("%s:%d", b.Address, b.Port)
		want = append(want,
			series("xlb_backend_packets_total", "backend", be, "service", web),
			series("xlb_backend_up", "backend", be, "service", web))
	}
	if len(st.Reasons) == 0 {
		t.Errorf("%s: the status has no data-plane reasons to compare the metrics with", node.Name)
	}
	for r := range st.Reasons {
		want = append(want, series("xlb_dataplane_reason_packets_total", "reason", r))
	}
	for _, s := range want {
		if _, ok := first.samples[s]; !ok {
			t.Errorf("%s: the scrape lacks %s", node.Name, s)
		}
		name, _, _ := strings.Cut(s, "{")
		if first.help[name] == "" {
			t.Errorf("%s: metric %s has no HELP", node.Name, name)
		}
	}
	for _, b := range serviceNamed(st, web).Backends {
		if v := first.samples[series("xlb_backend_up", "backend", fmt.Sprintf("%s:%d", b.Address, b.Port), "service", web)]; v != 1 {
			t.Errorf("%s: xlb_backend_up of %s is %v, want 1", node.Name, b.Address, v)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	const n = 100
	before, err := labrun.TakeSnapshot(e.p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := labrun.HTTPLoad(ctx, e.client.Namespace, e.web().Target(), n, parallel, nil); err != nil {
		t.Fatal(err)
	}
	after, err := labrun.TakeSnapshot(e.p)
	if err != nil {
		t.Fatal(err)
	}
	second, err := scrapeNode(node)
	if err != nil {
		t.Fatal(err)
	}
	c := after.Since(before).Clients[0].IP
	sent := c.TCPOutSegs
	svc := series("xlb_service_packets_total", "service", web)
	grew := second.samples[svc] - first.samples[svc]
	var beGrew float64
	for _, b := range serviceNamed(st, web).Backends {
		s := series("xlb_backend_packets_total", "backend", fmt.Sprintf("%s:%d", b.Address, b.Port), "service", web)
		beGrew += second.samples[s] - first.samples[s]
	}
	t.Logf("%d requests: the client sent %d TCP segments; %s grew by %.0f, the backends' packets by %.0f",
		n, sent, svc, grew, beGrew)
	if sent < 3*n {
		t.Errorf("the client sent %d TCP segments for %d requests, want at least %d", sent, n, 3*n)
	}
	if grew < float64(sent) {
		t.Errorf("%s grew by %.0f, want at least the %d segments the client sent to the VIP", svc, grew, sent)
	}
	if beGrew != grew {
		t.Errorf("the backends' packet counters grew by %.0f, the service's by %.0f: want the same", beGrew, grew)
	}
}
