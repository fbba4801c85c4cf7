package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"imagecache.io/imagecache/api/v1alpha1"
	"imagecache.io/imagecache/internal/controller"
)

// kubeOptions say whether and how serve talks to Kubernetes.
type kubeOptions struct {
	kubeconfig  string
	leaderElect bool
	publicURL   string
}

// restConfig finds Kubernetes access: --kubeconfig, else in-cluster; nil when there is none (no controllers).
func (o kubeOptions) restConfig() (*rest.Config, error) {
	if o.kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", o.kubeconfig, err)
		}
		return cfg, nil
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		return nil, nil
	}
	return rest.InClusterConfig()
}

// publicBase is how clients reach this server, for the URLs written into status: --public-url, else the
// Service in the pod's namespace, else the listen address.
func (o kubeOptions) publicBase(listen string) string {
	if o.publicURL != "" {
		return o.publicURL
	}
	_, port, _ := net.SplitHostPort(listen)
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return fmt.Sprintf("http://imagecache.%s.svc:%s", ns, port)
	}
	return "http://" + listen
}

// Leader election timings come from these environment variables when set (an advanced setting: tests
// shorten them; a slow API server may want longer ones), else controller-runtime's defaults.
const (
	envLeaseDuration = "IMAGECACHE_LEADER_ELECTION_LEASE_DURATION"
	envRenewDeadline = "IMAGECACHE_LEADER_ELECTION_RENEW_DEADLINE"
	envRetryPeriod   = "IMAGECACHE_LEADER_ELECTION_RETRY_PERIOD"
)

type leaseTimings struct{ lease, renew, retry time.Duration }

func leaseTimingsFromEnv() (leaseTimings, error) {
	t := leaseTimings{lease: 15 * time.Second, renew: 10 * time.Second, retry: 2 * time.Second}
	for _, v := range []struct {
		env string
		d   *time.Duration
	}{{envLeaseDuration, &t.lease}, {envRenewDeadline, &t.renew}, {envRetryPeriod, &t.retry}} {
		s := os.Getenv(v.env)
		if s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return t, fmt.Errorf("%s=%q: want a positive duration such as 15s", v.env, s)
		}
		*v.d = d
	}
	// client-go's own rule, checked here so that serve refuses to start rather than restarting forever.
	if t.lease <= t.renew || float64(t.renew) <= 1.2*float64(t.retry) {
		return t, fmt.Errorf("leader election timings: want lease duration (%v) > renew deadline (%v) > 1.2 x retry period (%v); set %s, %s and %s",
			t.lease, t.renew, t.retry, envLeaseDuration, envRenewDeadline, envRetryPeriod)
	}
	return t, nil
}

const (
	// A manager that stopped with an error is built again after this delay, doubled after each failure
	// up to maxRestartDelay, and back to the first delay once a manager has run for healthyRun.
	firstRestartDelay = time.Second
	maxRestartDelay   = time.Minute
	healthyRun        = 2 * time.Minute
	// How long stopping waits for reconciles in progress, and then how long the command waits for the
	// manager (which releases the leader lease last) before it exits anyway.
	gracefulStop    = 10 * time.Second
	waitForStopping = 15 * time.Second
)

// controllersRun is the controllers running in the background: serve waits for them at exit (the manager
// releases the leader lease last) and reports in /readyz while they are down.
type controllersRun struct {
	done    chan struct{}
	problem atomic.Pointer[string]
}

// Wait waits for the controllers to stop, up to limit.
func (r *controllersRun) Wait(limit time.Duration, log *slog.Logger) {
	select {
	case <-r.done:
	case <-time.After(limit):
		log.Warn("Kubernetes controllers did not stop in time; exiting without them", "waited", limit.String())
	}
}

// Problem says why the controllers are down, or "" while they run (or when there are none).
func (r *controllersRun) Problem() string {
	if r == nil {
		return ""
	}
	if p := r.problem.Load(); p != nil {
		return *p
	}
	return ""
}

func (r *controllersRun) setProblem(s string) {
	if s == "" {
		r.problem.Store(nil)
		return
	}
	r.problem.Store(&s)
}

// startControllers runs the controllers until ctx ends. A controller-runtime manager stops for good when
// it loses the leader election (an API outage longer than the renew deadline) or its informers cannot sync
// (an API unreachable at start), and cannot be started again: a new one is built and started, with capped
// exponential backoff, so the controllers come back when the API does. The cache keeps serving meanwhile.
func startControllers(ctx context.Context, cfg *rest.Config, o kubeOptions, deps controller.Deps, log *slog.Logger) (*controllersRun, error) {
	timings, err := leaseTimingsFromEnv()
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	ctrl.SetLogger(logr.FromSlogHandler(log.With("component", "controller").Handler()))
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "default"
	}
	controllers := controller.New(deps)
	build := func() (manager.Manager, error) {
		mgr, err := ctrl.NewManager(cfg, ctrl.Options{
			Scheme:                        scheme,
			LeaderElection:                o.leaderElect,
			LeaderElectionID:              "imagecache-leader",
			LeaderElectionNamespace:       ns,
			LeaderElectionReleaseOnCancel: true,
			LeaseDuration:                 &timings.lease,
			RenewDeadline:                 &timings.renew,
			RetryPeriod:                   &timings.retry,
			GracefulShutdownTimeout:       ptr.To(gracefulStop),
			Metrics:                       metricsserver.Options{BindAddress: "0"}, // imagecache serves /metrics itself
			HealthProbeBindAddress:        "0",
		})
		if err != nil {
			return nil, fmt.Errorf("start the Kubernetes controllers: %w", err)
		}
		return mgr, controllers.Setup(mgr)
	}
	// The first manager is built here so that a configuration error stops serve at start.
	mgr, err := build()
	if err != nil {
		return nil, err
	}
	log.Info("Kubernetes controllers starting", "host", cfg.Host, "leaderElection", o.leaderElect, "leaseNamespace", ns,
		"leaseDuration", timings.lease.String(), "publicURL", deps.PublicURL)
	run := &controllersRun{done: make(chan struct{})}
	go func() {
		defer close(run.done)
		superviseControllers(ctx, mgr, build, run, log)
	}()
	return run, nil
}

// superviseControllers runs mgr, and a new manager each time the running one stops while ctx is alive.
func superviseControllers(ctx context.Context, mgr manager.Manager, build func() (manager.Manager, error), run *controllersRun, log *slog.Logger) {
	delay := firstRestartDelay
	for attempt := 1; ; attempt++ {
		started := time.Now()
		go func(mgr manager.Manager) {
			// Up again once this manager has caught up with the API.
			if mgr.GetCache().WaitForCacheSync(ctx) {
				run.setProblem("")
			}
		}(mgr)
		err := mgr.Start(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = fmt.Errorf("the manager returned while serve is running")
		}
		if time.Since(started) >= healthyRun {
			delay = firstRestartDelay
		}
		log.Error("Kubernetes controllers stopped; the cache keeps serving and the controllers are restarted", "error", err, "restartIn", delay.String())
		run.setProblem(fmt.Sprintf("Kubernetes controllers down since %s (%v): resources are not fetched, pinned or updated until they are back; restarting",
			time.Now().UTC().Format(time.TimeOnly), err))
		if mgr = rebuild(ctx, build, &delay, log); mgr == nil {
			return
		}
		log.Info("Kubernetes controllers restarting", "reason", err.Error(), "restart", attempt)
	}
}

// rebuild waits out the backoff delay and builds a new manager, retrying; nil when ctx ends first.
func rebuild(ctx context.Context, build func() (manager.Manager, error), delay *time.Duration, log *slog.Logger) manager.Manager {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*delay):
		}
		*delay = min(2**delay, maxRestartDelay)
		mgr, err := build()
		if err == nil {
			return mgr
		}
		log.Error("build the Kubernetes controllers again", "error", err, "retryIn", delay.String())
	}
}
