package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	k8sapi "github.com/xlbproject/xlb/internal/k8s/api"
	"github.com/xlbproject/xlb/testbed/k8stest"
	"github.com/xlbproject/xlb/testbed/testenv"
)

// controllerJob is the job label of the controller's series.
const controllerJob = "xlb-controller"

// poolSize is the AddressPool's size: the run asks for more Services
// than it holds, so that the pool runs out.
const (
	poolName  = "dashimg"
	poolRange = "10.99.9.1-10.99.9.6"
	poolSize  = 6
)

// cluster is a Kubernetes control plane (testbed/k8stest) with xlb's CRDs,
// an AddressPool and `xlb controller`.
type cluster struct {
	cp          *k8stest.ControlPlane
	client      *kubernetes.Clientset
	dyn         *dynamic.DynamicClient
	ctl         *exec.Cmd
	ctlDone     <-chan error
	metricsAddr string
	logPath     string
}

func startCluster(ctx context.Context, xlb, stateDir string) (c *cluster, err error) {
	cp, err := k8stest.Start(ctx, k8stest.Options{})
	if err != nil {
		return nil, err
	}
	c = &cluster{cp: cp}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.stop())
		}
	}()
	if c.client, c.dyn, err = cp.Clients(50, 100); err != nil {
		return nil, err
	}
	crds, err := filepath.Glob("deploy/crds/*.yaml")
	if err != nil || len(crds) == 0 {
		return nil, fmt.Errorf("no CRDs in deploy/crds (run from the repository's root): %v", err)
	}
	if err := k8stest.InstallCRDs(ctx, c.dyn, 30*time.Second, crds...); err != nil {
		return nil, err
	}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "xlb-system"}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": k8sapi.AddressPoolResource.GroupVersion().String(), "kind": "AddressPool",
		"metadata": map[string]any{"name": poolName},
		"spec":     map[string]any{"addresses": []any{poolRange}},
	}}
	if _, err := c.dyn.Resource(k8sapi.AddressPoolResource).Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create AddressPool: %w", err)
	}
	if c.metricsAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	c.logPath = filepath.Join(stateDir, "controller.log")
	if err := c.startController(xlb); err != nil {
		return nil, err
	}
	return c, nil
}

// freeAddr is a loopback address with a port nobody listens on.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startController runs `xlb controller` on the host, where the API server
// listens; it dies with this program.
func (c *cluster) startController(xlb string) error {
	logf, err := os.Create(c.logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(xlb, "controller", "--kubeconfig", c.cp.Kubeconfig, "--namespace", "xlb-system", "--identity", "dashimg",
		"--metrics-addr", c.metricsAddr, "--lease-duration", "4s", "--renew-deadline", "3s", "--retry-period", "500ms")
	cmd.Stdout, cmd.Stderr = logf, logf
	done, err := testenv.StartTied(cmd)
	if err != nil {
		return fmt.Errorf("start xlb controller: %w", err)
	}
	c.ctl, c.ctlDone = cmd, done
	return nil
}

// createService creates Service i of type LoadBalancer and xlb's class.
func (c *cluster) createService(ctx context.Context, i int) error {
	cls := k8sapi.LoadBalancerClass
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: serviceName(i), Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cls,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	_, err := c.client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	return err
}

func (c *cluster) deleteService(ctx context.Context, i int) error {
	err := c.client.CoreV1().Services("default").Delete(ctx, serviceName(i), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func serviceName(i int) string { return fmt.Sprintf("shop-%d", i) }

// stop ends the controller (SIGTERM, then SIGKILL after 10 s) and the
// control plane.
func (c *cluster) stop() error {
	if c.ctl != nil {
		_ = c.ctl.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.ctlDone:
		case <-time.After(10 * time.Second):
			_ = c.ctl.Process.Kill()
			<-c.ctlDone
		}
		c.ctl = nil
	}
	return c.cp.Stop()
}
