package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	"imagecache.io/imagecache/api/v1alpha1"
)

// shortLeases makes the caches this test starts elect, renew and lose their leader lease within seconds
// (serve reads these variables; the child process inherits the test's environment).
func shortLeases(t *testing.T) {
	t.Setenv("IMAGECACHE_LEADER_ELECTION_LEASE_DURATION", "4s")
	t.Setenv("IMAGECACHE_LEADER_ELECTION_RENEW_DEADLINE", "3s")
	t.Setenv("IMAGECACHE_LEADER_ELECTION_RETRY_PERIOD", "500ms")
}

// kubeconfigVia writes a copy of the cache's kubeconfig whose server is addr (same TLS name: the API
// server's certificate is for 127.0.0.1, whatever the port).
func (k *cluster) kubeconfigVia(t *testing.T, addr string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(k.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + addr
	}
	path := filepath.Join(t.TempDir(), "kubeconfig-via-forwarder")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// apiAddr is the API server's host:port, from the cache's kubeconfig.
func (k *cluster) apiAddr(t *testing.T) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(k.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		return strings.TrimPrefix(c.Server, "https://")
	}
	t.Fatal("kubeconfig names no cluster")
	return ""
}

func newImageCache(name string, refs ...string) *v1alpha1.ImageCache {
	ic := &v1alpha1.ImageCache{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	for _, r := range refs {
		ic.Spec.Images = append(ic.Spec.Images, v1alpha1.ImageSpec{Ref: r})
	}
	return ic
}

func waitReady(t *testing.T, k *cluster, ic *v1alpha1.ImageCache, what string) *v1alpha1.ImageCache {
	t.Helper()
	return waitImageCache(t, k, types.NamespacedName{Namespace: ic.Namespace, Name: ic.Name}, what, func(ic *v1alpha1.ImageCache) error {
		return readyIs(ic.Status.Conditions, metav1.ConditionTrue, ic.Generation)
	})
}

// TestControllerRestartsAfterAPIOutage: the API server goes away long enough for the cache to lose the
// leader election, which stops controller-runtime's manager for good. The cache keeps serving, and once the
// API is back its controllers are too: a resource created afterwards is fetched and reported.
func TestControllerRestartsAfterAPIOutage(t *testing.T) {
	k := startCluster(t)
	reg := startRegistry(t, registryOpts{})
	d1, _ := pushImage(t, reg.Host, "team/before:v1", "oci", 1, 1024)
	d2, _ := pushImage(t, reg.Host, "team/after:v1", "oci", 1, 1024)
	fwd := startForwarder(t, k.apiAddr(t))
	shortLeases(t)
	c := startImagecacheWith(t, fmt.Sprintf("upstreams:\n  - {name: upstream.test, url: %q}\n", reg.URL),
		"--kubeconfig", k.kubeconfigVia(t, fwd.Addr()), "--leader-elect=true")
	ctx := context.Background()
	before := newImageCache("before", "upstream.test/team/before:v1")
	if err := k.client.Create(ctx, before); err != nil {
		t.Fatal(err)
	}
	waitReady(t, k, before, "Ready before the outage")

	fwd.Cut()
	waitFor(t, 30*time.Second, "the cache notices the lost election", func() error {
		if !strings.Contains(c.Log(), "leader election lost") {
			return errors.New(`no "leader election lost" in the log`)
		}
		return nil
	})
	// Meanwhile the cache serves what it has, and says it is alive.
	if a := call(t, http.MethodGet, c.URL+"/healthz"); a.Status != http.StatusOK {
		t.Fatalf("/healthz during the outage: %d", a.Status)
	}
	pullImage(t, c.Host, "upstream.test/team/before:v1", d1, "application/vnd.oci.image.manifest.v1+json")
	// Ready still (it serves), but saying what is wrong.
	waitFor(t, 30*time.Second, "/readyz says the controllers are down", func() error {
		a := call(t, http.MethodGet, c.URL+"/readyz")
		if a.Status != http.StatusOK || !strings.Contains(string(a.Body), "Kubernetes controllers down") {
			return fmt.Errorf("%d %s", a.Status, a.Body)
		}
		return nil
	})

	fwd.Restore(t)
	after := newImageCache("after", "upstream.test/team/after:v1")
	if err := k.client.Create(ctx, after); err != nil {
		t.Fatal(err)
	}
	got := waitReady(t, k, after, "a resource created after the outage is Ready")
	if got.Status.Images[0].Digest != d2 || !strings.Contains(c.Log(), "Kubernetes controllers restarting") {
		t.Fatalf("digest %s (want %s); restart logged: %v", got.Status.Images[0].Digest, d2, strings.Contains(c.Log(), "Kubernetes controllers restarting"))
	}
	if a := call(t, http.MethodGet, c.URL+"/readyz"); strings.Contains(string(a.Body), "controllers down") {
		t.Errorf("/readyz after the controllers came back: %s", a.Body)
	}
}

// TestControllerNewLeaderWritesStatus: a cache that stops on SIGTERM hands the lease back at once, and a
// replica that becomes leader writes status for every resource then, not at the next periodic reconcile
// (refreshInterval, an hour here).
func TestControllerNewLeaderWritesStatus(t *testing.T) {
	k := startCluster(t)
	reg := startRegistry(t, registryOpts{})
	pushImage(t, reg.Host, "team/app:v1", "oci", 1, 1024)
	shortLeases(t)
	c := k.startCache(t, fmt.Sprintf("upstreams:\n  - {name: upstream.test, url: %q}\n", reg.URL))
	ctx := context.Background()
	ic := newImageCache("app", "upstream.test/team/app:v1")
	if err := k.client.Create(ctx, ic); err != nil {
		t.Fatal(err)
	}
	waitReady(t, k, ic, "Ready")

	c.Stop(t)
	var lease coordinationv1.Lease
	if err := k.client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "imagecache-leader"}, &lease); err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("after SIGTERM the lease is still held by %q: the next leader waits for it to expire", *h)
	}

	// A cache that dies holds the lease until it expires; its successor reconciles as a follower first.
	c.Start(t)
	waitFor(t, 20*time.Second, "the restarted cache leads", func() error { return holderIs(ctx, k, true) })
	c.Kill(t)
	tamper(t, k, ic)
	c.Start(t)
	waitImageCache(t, k, types.NamespacedName{Namespace: "default", Name: "app"}, "status rewritten after the election", func(ic *v1alpha1.ImageCache) error {
		if ic.Status.CachedImages != "1/1" {
			return fmt.Errorf("cachedImages %q", ic.Status.CachedImages)
		}
		return readyIs(ic.Status.Conditions, metav1.ConditionTrue, ic.Generation)
	})
}

func holderIs(ctx context.Context, k *cluster, held bool) error {
	var lease coordinationv1.Lease
	if err := k.client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "imagecache-leader"}, &lease); err != nil {
		return err
	}
	if h := lease.Spec.HolderIdentity; (h != nil && *h != "") != held {
		return fmt.Errorf("lease holder %v", h)
	}
	return nil
}

// tamper makes the status wrong, as if written long ago by someone else.
func tamper(t *testing.T, k *cluster, ic *v1alpha1.ImageCache) {
	t.Helper()
	ctx := context.Background()
	if err := k.client.Get(ctx, types.NamespacedName{Namespace: ic.Namespace, Name: ic.Name}, ic); err != nil {
		t.Fatal(err)
	}
	ic.Status = v1alpha1.ImageCacheStatus{CachedImages: "0/1", Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady,
		Status: metav1.ConditionFalse, Reason: "Tampered", Message: "written by the test", LastTransitionTime: metav1.Now()}}}
	if err := k.client.Status().Update(ctx, ic); err != nil {
		t.Fatal(err)
	}
}

// forwarder is a TCP proxy on 127.0.0.1 that the test can cut (refusing new connections and breaking open
// ones, as when an API server goes away) and restore on the same port.
type forwarder struct {
	target, addr string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]bool
	wg           sync.WaitGroup
}

func startForwarder(t *testing.T, target string) *forwarder {
	t.Helper()
	f := &forwarder{target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	f.serve(ln)
	t.Cleanup(func() {
		f.Cut()
		f.wg.Wait()
	})
	return f
}

func (f *forwarder) Addr() string { return f.addr }

func (f *forwarder) serve(ln net.Listener) {
	f.ln = ln
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				f.pipe(conn)
			}()
		}
	}()
}

// pipe copies both ways until either side ends, then closes both.
func (f *forwarder) pipe(client net.Conn) {
	upstream, err := net.Dial("tcp", f.target)
	if err != nil || !f.track(client, upstream) {
		client.Close()
		if upstream != nil {
			upstream.Close()
		}
		return
	}
	done := make(chan struct{}, 2)
	go func() { io.Copy(upstream, client); done <- struct{}{} }()
	go func() { io.Copy(client, upstream); done <- struct{}{} }()
	<-done
	client.Close()
	upstream.Close()
	<-done
	f.mu.Lock()
	delete(f.conns, client)
	delete(f.conns, upstream)
	f.mu.Unlock()
}

// track registers a connection pair, unless the forwarder was cut meanwhile.
func (f *forwarder) track(conns ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln == nil {
		return false
	}
	for _, c := range conns {
		f.conns[c] = true
	}
	return true
}

// Cut closes the listener and every open connection.
func (f *forwarder) Cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != nil {
		f.ln.Close()
		f.ln = nil
	}
	for c := range f.conns {
		c.Close()
	}
}

// Restore listens again on the same port.
func (f *forwarder) Restore(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != nil {
		return
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		t.Fatalf("forwarder: listen again on %s: %v", f.addr, err)
	}
	f.serve(ln)
}
