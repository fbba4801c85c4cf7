package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"imagecache.io/imagecache/internal/admin"
	"imagecache.io/imagecache/internal/cache"
	"imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/controller"
	"imagecache.io/imagecache/internal/eviction"
	"imagecache.io/imagecache/internal/files"
	"imagecache.io/imagecache/internal/metrics"
	"imagecache.io/imagecache/internal/reference"
	"imagecache.io/imagecache/internal/registry"
	"imagecache.io/imagecache/internal/server"
	"imagecache.io/imagecache/internal/stats"
	"imagecache.io/imagecache/internal/store"
	"imagecache.io/imagecache/internal/ui"
	"imagecache.io/imagecache/internal/upstream"
)

type serveOptions struct {
	config, listen, storage string
	proxyListen, proxyCA    string
	logFormat, logLevel     string
	accessLog               bool
	kube                    kubeOptions
}

func newServeCommand() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the cache server",
		Long: `Run the cache server. With no --config it listens on 127.0.0.1:5000, stores content in
./imagecache-data and mirrors docker.io (the default upstream), ghcr.io, quay.io, registry.k8s.io,
gcr.io, mcr.microsoft.com and public.ecr.aws.`,
		Example: `  imagecache serve
  imagecache serve --config /etc/imagecache/config.yaml
  imagecache serve --listen 0.0.0.0:5000 --storage /var/lib/imagecache
  imagecache serve --config /etc/imagecache/config.yaml --proxy-listen 0.0.0.0:3128 --proxy-ca /etc/imagecache-proxy-ca`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return serve(cmd.Context(), o) },
	}
	f := cmd.Flags()
	f.StringVarP(&o.config, "config", "c", "", "config file (YAML); without it the embedded default is used")
	f.StringVar(&o.listen, "listen", "", "address to listen on, overriding the config's listen")
	f.StringVar(&o.storage, "storage", "", "storage path, overriding the config's storage.path")
	f.StringVar(&o.proxyListen, "proxy-listen", "", "address for the intercepting proxy, turning it on or overriding the config's proxy.listen")
	f.StringVar(&o.proxyCA, "proxy-ca", "", "directory holding the proxy's CA as ca.crt and ca.key (e.g. a mounted Secret), overriding the config's proxy.ca")
	f.StringVar(&o.logFormat, "log-format", "auto", "log format: auto (text on a terminal, JSON otherwise), text or json")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.BoolVar(&o.accessLog, "access-log", true, "log one line per request")
	f.StringVar(&o.kube.kubeconfig, "kubeconfig", "", "run the ImageCache/IronicImageCache controllers against this cluster (in a pod, the in-cluster config is used without this flag)")
	f.BoolVar(&o.kube.leaderElect, "leader-elect", true, "elect one replica to write status (every replica still fetches and serves)")
	f.StringVar(&o.kube.publicURL, "public-url", "", "how clients reach this server, for URLs in resource status (default: http://imagecache.$POD_NAMESPACE.svc:<port>, or the listen address)")
	return cmd
}

func loadConfig(o serveOptions) (*config.Config, error) {
	cfg := config.Default()
	if o.config != "" {
		var err error
		if cfg, err = config.Load(o.config); err != nil {
			return nil, err
		}
	}
	if o.listen != "" {
		cfg.Listen = o.listen
	}
	if o.storage != "" {
		cfg.Storage.Path = o.storage
	}
	if o.proxyListen != "" {
		// The rule the config applies to proxy.listen: an address missing its port would only fail at
		// net.Listen, after the store is opened.
		if _, port, err := net.SplitHostPort(o.proxyListen); err != nil || port == "" {
			return nil, fmt.Errorf("--proxy-listen: %q is not a host:port to listen on (write e.g. 0.0.0.0:3128 or :3128)", o.proxyListen)
		}
		if cfg.Proxy == nil {
			cfg.Proxy = &config.Proxy{}
		}
		cfg.Proxy.Listen = o.proxyListen
	}
	if o.proxyCA != "" {
		if cfg.Proxy == nil {
			return nil, errors.New("--proxy-ca: the proxy is off; turn it on with --proxy-listen or proxy.listen in the config")
		}
		cfg.Proxy.CA = config.ProxyCA{CertFile: filepath.Join(o.proxyCA, "ca.crt"), KeyFile: filepath.Join(o.proxyCA, "ca.key")}
	}
	return cfg, nil
}

func serve(ctx context.Context, o serveOptions) error {
	log, err := newLogger(os.Stderr, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(o)
	if err != nil {
		return err
	}
	st, err := store.Open(cfg.Storage.Path)
	if err != nil {
		return err
	}
	defer st.Close()

	m := metrics.New()
	statistics := stats.New()
	m.OnUpstream = statistics.Upstream
	clients := map[string]*upstream.Client{}
	var routes []reference.Upstream
	for _, u := range cfg.Upstreams {
		c, err := upstream.New(u, m.WrapUpstream, log)
		if err != nil {
			return err
		}
		clients[u.Name] = c
		m.WatchUpstreamSilence(u.Name, c.Silent)
		routes = append(routes, reference.Upstream{Name: u.Name, Aliases: u.Hosts(), Default: u.Default, DockerHub: u.IsDockerHub()})
	}
	c := cache.New(st, clients, cfg.Rules(), log)
	evictor := eviction.New(st, cfg.Storage.MaxSize, cfg.Storage.LowWatermark, log)
	c.MaxObjectSize, c.StorageFull, c.MakeRoom = cfg.Storage.MaxObjectSize, evictor.FreeLater, evictor.MakeRoom
	evictor.InFlight = c.InFlightBytes
	router := reference.NewRouter(routes)
	pins, err := configPins(cfg, router)
	if err != nil {
		return err
	}
	if err := st.SetPins("config", pins); err != nil {
		return err
	}
	observeStorage(m, st, evictor, cfg.Storage.MaxSize)
	m.GaugeFunc("imagecache_downloads_in_flight", "Blob downloads from upstreams in progress.", func() float64 { return float64(c.DownloadsInFlight()) })
	sets, err := files.NewManager(st, cfg.Files, c, router, log)
	if err != nil {
		return err
	}
	var kube *controllersRun // set once the controllers start; /readyz reports them down
	handler := server.Handler(server.Routes{
		Registry: registry.New(c, router, log, observer{m, statistics}),
		Files:    sets,
		API: admin.New(admin.Deps{Config: cfg, Store: st, Cache: c, Files: sets, Evictor: evictor,
			Stats: statistics, Router: router, Log: log}),
		UI: ui.New(ui.Deps{Config: cfg, Stats: statistics.Snapshot, Usage: st.Usage, Images: evictor.Images,
			Pinned: evictor.PinnedBytes, Sets: sets.Statuses, Version: buildVersion(), Log: log}),
		Metrics: promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}),
		Ready:   func() ([]string, error) { return readiness(evictor, cfg.Storage.MaxSize, kube) },
	}, log, o.accessLog)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (choose another address with --listen or listen: in the config)", cfg.Listen, err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	stopProxy, err := startProxy(cfg, handler, ln.Addr().String(), log)
	if err != nil {
		return err
	}
	defer stopProxy()
	logStartup(log, cfg, ln.Addr().String())

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The controllers are wired (they follow the sets' refreshes) before the sets' loops start.
	if kube, err = startKubernetes(ctx, o, cfg, controller.Deps{Cache: c, Files: sets, Store: st, Router: router, Upstreams: clients, Log: log}); err != nil {
		return err
	}
	if kube != nil {
		// The manager releases the leader lease last as it stops: without this wait the process would exit
		// first, and the next leader would wait for the lease to expire.
		defer kube.Wait(15*time.Second, log)
	}
	sets.Run(ctx)
	evictor.Start(ctx)
	go flushAccessTimes(ctx, st, log)
	go func() {
		if n, err := st.SweepOrphans(ctx); err != nil {
			log.Warn("sweep orphaned files", "error", err)
		} else if n > 0 {
			log.Info("removed files left without an index record by an earlier crash", "files", n)
		}
	}()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing requests in progress (up to 10s)")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Warn("shutdown did not finish cleanly", "error", err)
	}
	return nil
}

// logStartup says what is served and how to point clients at it.
func logStartup(log *slog.Logger, cfg *config.Config, addr string) {
	var ups []string
	defaultName := ""
	for _, u := range cfg.Upstreams {
		s := u.Name + "=" + u.URL
		if u.Default {
			s += " (default)"
			defaultName = u.Name
		}
		ups = append(ups, s)
	}
	log.Info("imagecache serving", "version", buildVersion(), "listen", addr, "storage", cfg.Storage.Path, "upstreams", strings.Join(ups, ", "))
	example := "<upstream>/<repository>:<tag>"
	for i, u := range cfg.Upstreams {
		if u.Name == "docker.io" {
			example = "docker.io/library/alpine:latest"
			break
		}
		if i == 0 {
			example = u.Name + "/<repository>:<tag>"
		}
	}
	docker := fmt.Sprintf(`daemon.json: {"registry-mirrors": ["http://%s"]} (mirrors the default upstream %s)`, addr, defaultName)
	if defaultName == "" {
		docker = "registry-mirrors needs an upstream with default: true"
	}
	log.Info("point clients at it",
		"crane", fmt.Sprintf("crane pull --insecure %s/%s image.tar", addr, example),
		"containerd", fmt.Sprintf(`/etc/containerd/certs.d/<registry>/hosts.toml: [host."http://%s"] capabilities = ["pull", "resolve"]`, addr),
		"podman", fmt.Sprintf(`registries.conf: [[registry.mirror]] location = "%s/<registry>" insecure = true`, addr),
		"docker", docker)
}

// configPins are what the config names: its pins and every configured file set, as eviction finds them:
// upstream/repository:tag (or @digest) with the upstream's name where the config may use an alias or URL
// host, and Docker Hub's library/ where it may leave it out (docker.io/busybox:1.36).
func configPins(cfg *config.Config, router *reference.Router) ([]string, error) {
	var pins []string
	for _, p := range cfg.Pins {
		up, repository, ref, err := router.ResolveImage(p)
		if err != nil {
			return nil, fmt.Errorf("pins: %s: %w", p, err)
		}
		pins = append(pins, up+"/"+reference.Join(repository, ref))
	}
	for _, f := range cfg.Files {
		pins = append(pins, "files/"+f.Set)
	}
	return pins, nil
}

// flushAccessTimes writes the batched last-use times now and then, and at shutdown.
func flushAccessTimes(ctx context.Context, st *store.Store, log *slog.Logger) {
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := st.FlushAccessTimes(); err != nil {
				log.Warn("write access times", "error", err)
			}
		}
	}
}

// readiness keeps serving (ready) when pins alone exceed the limit, but says so.
func readiness(e *eviction.Evictor, limit int64, kube *controllersRun) ([]string, error) {
	var warnings []string
	if pinned, over := e.PinStatus(); over {
		warnings = append(warnings, fmt.Sprintf("pinned content (%d bytes) exceeds storage.maxSize (%d bytes): the store stays over its limit; raise maxSize or pin less", pinned, limit))
	}
	// Still ready: the cache serves what it holds whether or not the controllers run.
	if p := kube.Problem(); p != "" {
		warnings = append(warnings, p)
	}
	return warnings, nil
}

// observeStorage exports the store's figures as metrics.
func observeStorage(m *metrics.Metrics, st *store.Store, e *eviction.Evictor, limit int64) {
	m.GaugeFunc("imagecache_store_bytes", "Bytes of content stored.", func() float64 { b, _ := st.Usage(); return float64(b) })
	m.GaugeFunc("imagecache_store_objects", "Objects (blobs and manifests) stored.", func() float64 { _, n := st.Usage(); return float64(n) })
	m.CounterFunc("imagecache_corrupt_objects_total", "Stored objects found corrupt (on read or by verify) and moved aside.", func() float64 { return float64(st.CorruptFound()) })
	m.GaugeFunc("imagecache_store_limit_bytes", "storage.maxSize; 0 when unbounded.", func() float64 { return float64(limit) })
	m.GaugeFunc("imagecache_pinned_bytes", "Bytes of pinned content (as of the last eviction run).", func() float64 { b, _ := e.PinStatus(); return float64(b) })
	m.GaugeFunc("imagecache_pinned_over_limit", "1 when pinned content alone exceeds storage.maxSize.", func() float64 {
		if _, over := e.PinStatus(); over {
			return 1
		}
		return 0
	})
	e.OnRun = func(p eviction.Plan) {
		for _, u := range p.Evicted {
			m.Evictions.WithLabelValues(u.Kind).Inc()
			m.EvictedBytes.Add(float64(u.Bytes))
		}
	}
}

// startKubernetes starts the controllers when serve has Kubernetes access (nil, nil when it has not).
func startKubernetes(ctx context.Context, o serveOptions, cfg *config.Config, deps controller.Deps) (*controllersRun, error) {
	restCfg, err := o.kube.restConfig()
	if err != nil || restCfg == nil {
		return nil, err
	}
	deps.PublicURL = o.kube.publicBase(cfg.Listen)
	return startControllers(ctx, restCfg, o.kube, deps, deps.Log)
}

// observer feeds what the registry handler sees to the metrics and to the status page's stats.
type observer struct {
	m *metrics.Metrics
	s *stats.Stats
}

func (o observer) Request(api, result string) {
	o.m.ObserveRequest(api, result)
	o.s.Request(result)
}

func (o observer) Served(fromCache bool, n int64) {
	o.m.ObserveServed(fromCache, n)
	o.s.Bytes(fromCache, n)
}

func (o observer) Problem(kind, api, name, message string) { o.s.Problem(kind, api, name, message) }
