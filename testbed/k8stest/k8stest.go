// Package k8stest runs a real Kubernetes control plane for tests: etcd
// (Debian's etcd-server), kube-apiserver and kube-controller-manager
// (built from the k8s.io/kubernetes module by scripts/kube-build.sh), all
// on free loopback ports, with no kubelet and no scheduler.
//
// Tests act as kubectl with the admin token and as kubelets themselves:
// they create Node objects and set a Pod's IP and Ready condition through
// its status subresource, and the real EndpointSlice controller derives
// slices from that. Authorization is RBAC, so a test can check the
// project's own roles by impersonating another user.
package k8stest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// AdminUser is the user behind ControlPlane.Token, a member of
// system:masters.
const AdminUser = "xlb-admin"

// DefaultServiceCIDR is the service cluster IP range unless
// Options.ServiceCIDR says otherwise.
const DefaultServiceCIDR = "10.96.0.0/16"

// Bounds of the start-up waits, generous for a loaded 2-core machine.
const (
	etcdTimeout      = 30 * time.Second
	apiServerTimeout = 2 * time.Minute
	managerTimeout   = time.Minute
	stopGrace        = 10 * time.Second
)

// Options configure Start. The zero value is a working configuration.
type Options struct {
	// BinDir holds kube-apiserver and kube-controller-manager. Empty:
	// Build finds them in its cache or builds them.
	BinDir string
	// Etcd is the etcd binary. Empty: etcd on PATH (Debian's etcd-server).
	Etcd string
	// ServiceCIDR is the service cluster IP range. Empty:
	// DefaultServiceCIDR. An IPv4 range, then an IPv6 one after a comma,
	// make the API server dual-stack.
	ServiceCIDR string
	// Log receives progress. Nil: slog.Default().
	Log *slog.Logger
}

// ControlPlane is a running control plane. Stop ends it.
type ControlPlane struct {
	// Server is the API server's URL, https://127.0.0.1:PORT.
	Server string
	// Token is AdminUser's bearer token.
	Token string
	// CAFile is the PEM file of the CA that signed the API server's
	// certificate.
	CAFile string
	// Kubeconfig is an admin kubeconfig file (Server, CA, Token).
	Kubeconfig string
	// Dir is the temporary directory of certificates, etcd's data and a
	// log per process (etcd.log, kube-apiserver.log,
	// kube-controller-manager.log). Stop removes it.
	Dir string

	ca       *x509.CertPool
	procs    []*process
	stopOnce sync.Once
	stopErr  error
}

// Start starts etcd, kube-apiserver and kube-controller-manager and
// returns once the API server is ready and the controllers run (the
// default ServiceAccount exists, so Pods can be created in "default").
// ctx bounds the start, including a first build of the binaries; the
// processes outlive it until Stop. On error nothing is left running and
// the error carries the tail of the failed process's log.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	begin := time.Now()
	binDir := opts.BinDir
	if binDir == "" {
		var err error
		if binDir, err = Build(ctx, os.Stderr); err != nil {
			return nil, err
		}
	}
	apiServer := filepath.Join(binDir, "kube-apiserver")
	manager := filepath.Join(binDir, "kube-controller-manager")
	for _, bin := range []string{apiServer, manager} {
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("kubernetes control plane: %w", err)
		}
	}
	etcd, err := findEtcd(opts.Etcd)
	if err != nil {
		return nil, err
	}
	cidr := opts.ServiceCIDR
	if cidr == "" {
		cidr = DefaultServiceCIDR
	}
	serviceIP, err := firstServiceIP(cidr)
	if err != nil {
		return nil, err
	}

	dir, err := os.MkdirTemp("", "xlb-k8stest-")
	if err != nil {
		return nil, fmt.Errorf("kubernetes control plane: %w", err)
	}
	c := &ControlPlane{Dir: dir}
	if err := c.start(ctx, log, etcd, apiServer, manager, cidr, serviceIP); err != nil {
		err = fmt.Errorf("kubernetes control plane: %w", err)
		if stopErr := c.Stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		return nil, err
	}
	log.Info("kubernetes control plane ready", "server", c.Server, "dir", c.Dir,
		"took", time.Since(begin).Round(time.Millisecond))
	return c, nil
}

func (c *ControlPlane) start(ctx context.Context, log *slog.Logger, etcd, apiServer, manager, cidr string, serviceIP netip.Addr) error {
	files, err := writeFiles(c.Dir, serviceIP)
	if err != nil {
		return err
	}
	c.CAFile = files.caFile
	c.Token = files.adminToken
	c.ca = x509.NewCertPool()
	if !c.ca.AppendCertsFromPEM(files.caPEM) {
		return errors.New("generated CA does not parse")
	}
	client := c.HTTPClient()

	// etcd: one member, data in Dir.
	var etcdURL string
	err = c.launch(ctx, log, "etcd", etcd, 2, etcdTimeout, func(p []int) []string {
		etcdURL = "http://127.0.0.1:" + strconv.Itoa(p[0])
		peer := "http://127.0.0.1:" + strconv.Itoa(p[1])
		// A data dir per attempt: a member bootstrapped with other
		// peer URLs would refuse the new ones.
		return []string{
			"--name=xlb-test",
			"--data-dir=" + filepath.Join(c.Dir, "etcd-"+strconv.Itoa(p[1])),
			"--listen-client-urls=" + etcdURL,
			"--advertise-client-urls=" + etcdURL,
			"--listen-peer-urls=" + peer,
			"--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=xlb-test=" + peer,
			"--logger=zap",
			"--log-level=warn",
		}
	}, func(ctx context.Context, _ []int) error {
		return expectBody(ctx, http.DefaultClient, etcdURL+"/health", `"health":"true"`)
	})
	if err != nil {
		return err
	}

	err = c.launch(ctx, log, "kube-apiserver", apiServer, 1, apiServerTimeout, func(p []int) []string {
		c.Server = "https://127.0.0.1:" + strconv.Itoa(p[0])
		return []string{
			"--etcd-servers=" + etcdURL,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			// The "kubernetes" Service would get this loopback address
			// as its endpoint, which validation rejects every 10 s:
			// leave it without endpoints.
			"--endpoint-reconciler-type=none",
			"--secure-port=" + strconv.Itoa(p[0]),
			"--cert-dir=" + filepath.Join(c.Dir, "apiserver"),
			"--tls-cert-file=" + files.servingCert,
			"--tls-private-key-file=" + files.servingKey,
			"--client-ca-file=" + files.caFile,
			"--token-auth-file=" + files.tokenFile,
			"--authorization-mode=RBAC",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + files.saPub,
			"--service-account-signing-key-file=" + files.saKey,
			"--service-cluster-ip-range=" + cidr,
			"--allow-privileged=true",
			"--profiling=false",
		}
	}, func(ctx context.Context, _ []int) error {
		return expectBody(ctx, client, c.Server+"/readyz", "ok")
	})
	if err != nil {
		return err
	}
	if c.Kubeconfig, err = writeKubeconfig(c.Dir, "admin", c.Server, files.caPEM, files.adminToken); err != nil {
		return err
	}
	managerConfig, err := writeKubeconfig(c.Dir, "kube-controller-manager", c.Server, files.caPEM, files.managerToken)
	if err != nil {
		return err
	}

	err = c.launch(ctx, log, "kube-controller-manager", manager, 1, managerTimeout, func(p []int) []string {
		return []string{
			"--kubeconfig=" + managerConfig,
			"--authentication-kubeconfig=" + managerConfig,
			"--authorization-kubeconfig=" + managerConfig,
			// Bearer tokens only: the API server has no front-proxy
			// (request header) CA for it to look up.
			"--authentication-skip-lookup=true",
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(p[0]),
			"--tls-cert-file=" + files.servingCert,
			"--tls-private-key-file=" + files.servingKey,
			// No kubelets: the node lifecycle controller would mark
			// every Node unreachable and taint eviction would then
			// delete its Pods.
			"--controllers=*,-node-lifecycle-controller,-taint-eviction-controller",
			"--leader-elect=false",
			"--use-service-account-credentials=false",
			"--service-account-private-key-file=" + files.saKey,
			"--root-ca-file=" + files.caFile,
			"--profiling=false",
		}
	}, func(ctx context.Context, p []int) error {
		if err := expectBody(ctx, client, "https://127.0.0.1:"+strconv.Itoa(p[0])+"/healthz", "ok"); err != nil {
			return err
		}
		// The ServiceAccount controller runs: Pods in "default" are
		// admitted from now on.
		return expectBody(ctx, client, c.Server+"/api/v1/namespaces/default/serviceaccounts/default", `"name":"default"`)
	})
	return err
}

// HTTPClient returns a client that trusts the control plane's CA and
// sends the admin token unless a request has an Authorization header.
func (c *ControlPlane) HTTPClient() *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second, // bounds every call: not for watches
		Transport: &bearer{token: c.Token, next: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: c.ca, MinVersion: tls.VersionTLS12},
		}},
	}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}

// Stop ends every process (SIGTERM, SIGKILL after a grace period) and
// removes Dir. Calling it again returns the first result.
func (c *ControlPlane) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		for i := len(c.procs) - 1; i >= 0; i-- {
			if err := c.procs[i].stop(stopGrace); err != nil {
				errs = append(errs, err)
			}
		}
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, err)
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// logTails returns the last lines of every process's log.
func (c *ControlPlane) logTails(lines int) string {
	var b strings.Builder
	for _, p := range c.procs {
		fmt.Fprintf(&b, "--- %s (%s), last %d lines:\n%s\n", p.name, p.logFile, lines, tail(p.logFile, lines))
	}
	return b.String()
}

func findEtcd(path string) (string, error) {
	if path == "" {
		path = "etcd"
	}
	found, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("etcd: %w (install Debian's etcd-server: scripts/deps.sh)", err)
	}
	return found, nil
}

// firstServiceIP is the kubernetes Service's address: the first of
// the IPv4 range, which comes first ("10.96.0.0/16,fd00:96::/108" makes
// the API server dual-stack).
func firstServiceIP(cidr string) (netip.Addr, error) {
	first, _, _ := strings.Cut(cidr, ",")
	p, err := netip.ParsePrefix(first)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("service CIDR: %w", err)
	}
	if !p.Addr().Is4() || p.Bits() > 28 {
		return netip.Addr{}, fmt.Errorf("service CIDR %s: want an IPv4 prefix of /28 or larger", cidr)
	}
	return p.Masked().Addr().Next(), nil
}

// expectBody GETs url once and wants status 200 and want in the body.
func expectBody(ctx context.Context, client *http.Client, url, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, body)
	}
	return nil
}
