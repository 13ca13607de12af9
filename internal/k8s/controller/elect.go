package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Default leader election timing, as Kubernetes' own controllers use.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Election configures leader election through a coordination.k8s.io
// Lease.
type Election struct {
	Client kubernetes.Interface
	// Namespace and Name of the Lease.
	Namespace, Name string
	// Identity of this instance in the Lease (e.g. the pod name); it
	// must differ between instances.
	Identity string
	// LeaseDuration: how long others wait after the last renewal before
	// taking over. RenewDeadline: how long the leader keeps trying to
	// renew before it steps down; shorter than LeaseDuration, so that
	// it stops before anyone else starts. RetryPeriod: how often every
	// instance tries. Zero: the defaults.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Metrics, if not nil, get the leader gauge.
	Metrics *Metrics
	// Log receives leadership changes. Nil: slog.Default().
	Log *slog.Logger
}

// ErrLostLeadership is returned by RunElected when another instance took
// over; the process should exit and start again as a candidate.
var ErrLostLeadership = errors.New("lost the leader Lease")

// RunElected campaigns for the Lease and calls run while this instance
// leads, with a context that ends when leadership ends. When ctx ends it
// waits for run to return and only then gives the Lease up, so that the
// next leader never overlaps with this one's last writes. It returns nil
// when ctx ended, run's error if run failed, and ErrLostLeadership if the
// Lease was lost.
func RunElected(ctx context.Context, e Election, run func(context.Context) error) error {
	if e.Client == nil || e.Namespace == "" || e.Name == "" || e.Identity == "" {
		return errors.New("leader election: a client, the Lease's namespace and name, and an identity are needed")
	}
	if e.LeaseDuration == 0 {
		e.LeaseDuration = DefaultLeaseDuration
	}
	if e.RenewDeadline == 0 {
		e.RenewDeadline = DefaultRenewDeadline
	}
	if e.RetryPeriod == 0 {
		e.RetryPeriod = DefaultRetryPeriod
	}
	log := e.Log
	if log == nil {
		log = slog.Default()
	}
	lease := e.Namespace + "/" + e.Name

	// The elector's context ends only after run has returned: its end
	// releases the Lease.
	electCtx, stopElecting := context.WithCancel(context.Background())
	defer stopElecting()
	var (
		mu      sync.Mutex
		runDone chan struct{} // closed when run returns; nil before leading
		runErr  error
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		done := runDone
		mu.Unlock()
		if done != nil {
			<-done
		}
		stopElecting()
	})
	defer stop()

	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name},
			Client:     e.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: e.Identity},
		},
		LeaseDuration:   e.LeaseDuration,
		RenewDeadline:   e.RenewDeadline,
		RetryPeriod:     e.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leading context.Context) {
				done := make(chan struct{})
				mu.Lock()
				runDone = done
				mu.Unlock()
				defer close(done)
				runCtx, cancel := context.WithCancel(leading)
				defer cancel()
				defer context.AfterFunc(ctx, cancel)()
				log.Info("leading: allocating addresses", "lease", lease, "identity", e.Identity)
				e.Metrics.setLeader(true)
				err := run(runCtx)
				e.Metrics.setLeader(false)
				mu.Lock()
				runErr = err
				mu.Unlock()
				// Whatever ended run, this instance stops leading.
				stopElecting()
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(identity string) {
				if identity != e.Identity {
					log.Info("another instance leads", "lease", lease, "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	log.Info("campaigning for the leader Lease", "lease", lease, "identity", e.Identity)
	le.Run(electCtx)

	mu.Lock()
	done := runDone
	mu.Unlock()
	if done == nil {
		if ctx.Err() != nil {
			return nil // ctx ended before this instance led
		}
		// The elector returns on its own only after leading; run's
		// goroutine had not started yet, and gets an ended context.
		return fmt.Errorf("lease %s: %w", lease, ErrLostLeadership)
	}
	<-done
	mu.Lock()
	defer mu.Unlock()
	switch {
	case runErr != nil:
		return runErr
	case ctx.Err() != nil:
		log.Info("stopped leading", "lease", lease)
		return nil
	}
	return fmt.Errorf("lease %s: %w", lease, ErrLostLeadership)
}
