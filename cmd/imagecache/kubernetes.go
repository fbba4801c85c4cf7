package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
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

// startControllers runs the controllers until ctx ends. A Kubernetes API that is unreachable or refuses
// us is logged; the cache keeps serving.
func startControllers(ctx context.Context, cfg *rest.Config, o kubeOptions, deps controller.Deps, log *slog.Logger) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	ctrl.SetLogger(logr.FromSlogHandler(log.With("component", "controller").Handler()))
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "default"
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              "imagecache-leader",
		LeaderElectionNamespace:       ns,
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: "0"}, // imagecache serves /metrics itself
		HealthProbeBindAddress:        "0",
	})
	if err != nil {
		return fmt.Errorf("start the Kubernetes controllers: %w", err)
	}
	if err := controller.Setup(mgr, deps); err != nil {
		return err
	}
	go func() {
		log.Info("Kubernetes controllers starting", "host", cfg.Host, "leaderElection", o.leaderElect, "leaseNamespace", ns, "publicURL", deps.PublicURL)
		if err := mgr.Start(ctx); err != nil {
			log.Error("Kubernetes controllers stopped; the cache keeps serving", "error", err)
		}
	}()
	return nil
}
