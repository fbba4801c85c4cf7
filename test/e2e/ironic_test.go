package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"imagecache.io/imagecache/api/v1alpha1"
)

func waitIronic(t *testing.T, k *cluster, key types.NamespacedName, what string, ok func(*v1alpha1.IronicImageCache) error) *v1alpha1.IronicImageCache {
	t.Helper()
	var iic v1alpha1.IronicImageCache
	waitFor(t, 60*time.Second, what, func() error {
		if err := k.client.Get(context.Background(), key, &iic); err != nil {
			return err
		}
		return ok(&iic)
	})
	return &iic
}

// TestIronicImageCache: metal3's resource against a download site serving the x86_64 and aarch64 agents.
func TestIronicImageCache(t *testing.T) {
	k := startCluster(t)
	site := startFileServer(t)
	built := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	x86, arm := newIPATarball(t), newIPATarball(t)
	site.Set("/dib/ipa-centos9-stable-2025.1.tar.gz", x86.Tgz, built)
	site.Set("/dib/ipa-centos9-stable-2025.1_aarch64.tar.gz", arm.Tgz, built)
	c := k.startCache(t, "upstreams: []\n")
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "default", Name: "ipa"}
	iic := &v1alpha1.IronicImageCache{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}, Spec: v1alpha1.IronicImageCacheSpec{
		AgentDownloadURL:     site.URL + "/dib",
		AgentBranch:          "stable/2025.1",
		Architectures:        []string{"x86_64", "aarch64"},
		AgentDownloaderImage: "quay.io/metal3-io/ironic-ipa-downloader",
	}}
	if err := k.client.Create(ctx, iic); err != nil {
		t.Fatal(err)
	}
	got := waitIronic(t, k, key, "IronicImageCache Ready", func(i *v1alpha1.IronicImageCache) error {
		return readyIs(i.Status.Conditions, metav1.ConditionTrue, i.Generation)
	})
	if got.Spec.AgentFlavor != "centos9" {
		t.Fatalf("agentFlavor default %q, want centos9 (CRD default)", got.Spec.AgentFlavor)
	}
	if !strings.Contains(got.Status.DownloaderImage, "not used") {
		t.Fatalf("status does not say agentDownloaderImage is unused: %q", got.Status.DownloaderImage)
	}
	if got.Status.KernelURL != got.Status.Architectures[0].KernelURL || !strings.HasSuffix(got.Status.KernelURL, "/ironic-python-agent.kernel") {
		t.Fatalf("kernelURL %q", got.Status.KernelURL)
	}
	serves := func(url string, want []byte) {
		t.Helper()
		if a := call(t, http.MethodGet, url); a.Status != 200 || !bytes.Equal(a.Body, want) {
			t.Fatalf("GET %s: %d, %d bytes, want the agent's %d bytes", url, a.Status, len(a.Body), len(want))
		}
	}
	for _, a := range got.Status.Architectures {
		want := x86
		if a.Architecture == "aarch64" {
			want = arm
			if !strings.HasSuffix(a.KernelURL, "/ironic-python-agent_aarch64.kernel") {
				t.Fatalf("aarch64 kernel URL %q", a.KernelURL)
			}
		}
		serves(a.KernelURL, want.Kernel)
		serves(a.InitramfsURL, want.Initramfs)
		if a.LastModified == nil || !a.LastModified.Time.Equal(built) {
			t.Fatalf("%s lastModified %v, want the site's %v", a.Architecture, a.LastModified, built)
		}
	}

	// A new agent appears on the site with the same validators' dates as before... no: a newer one, and the
	// minimum modification time moves past the cached copy: the next fetch is unconditional and publishes it.
	newer := newIPATarball(t)
	rebuilt := built.Add(48 * time.Hour)
	site.Set("/dib/ipa-centos9-stable-2025.1.tar.gz", newer.Tgz, rebuilt)
	before := len(site.Requests("/dib/ipa-centos9-stable-2025.1.tar.gz"))
	k.client.Get(ctx, key, iic)
	minTime := metav1.NewTime(built.Add(24 * time.Hour))
	iic.Spec.AgentMinimumModificationTime = &minTime
	if err := k.client.Update(ctx, iic); err != nil {
		t.Fatal(err)
	}
	got = waitIronic(t, k, key, "the newer agent published", func(i *v1alpha1.IronicImageCache) error {
		if err := readyIs(i.Status.Conditions, metav1.ConditionTrue, i.Generation); err != nil {
			return err
		}
		if lm := i.Status.Architectures[0].LastModified; lm == nil || !lm.Time.Equal(rebuilt) {
			return fmt.Errorf("x86_64 lastModified %v, want %v", lm, rebuilt)
		}
		return nil
	})
	serves(got.Status.KernelURL, newer.Kernel)
	reqs := site.Requests("/dib/ipa-centos9-stable-2025.1.tar.gz")[before:]
	if len(reqs) == 0 || reqs[0].IfNoneMatch != "" || reqs[0].IfModifiedSince != "" {
		t.Fatalf("after the minimum moved: requests %+v, want an unconditional download", reqs)
	}

	// The site goes away: the agent stays served, and the status says it is stale.
	site.Stop()
	stateURL := c.URL + "/api/v1/sets/default_ipa~agent/refresh"
	if a := call(t, http.MethodPost, stateURL); a.Status != http.StatusBadGateway {
		t.Fatalf("refresh with the site down: %d %s", a.Status, a.Body)
	}
	k.client.Get(ctx, key, iic)
	iic.Annotations = map[string]string{"test/poke": "1"} // a watch event: reconcile now rather than in an hour
	k.client.Update(ctx, iic)
	waitIronic(t, k, key, "stale reported", func(i *v1alpha1.IronicImageCache) error {
		d := condition(i.Status.Conditions, v1alpha1.ConditionDegraded)
		if d == nil || d.Status != metav1.ConditionTrue || i.Status.Architectures[0].State != v1alpha1.StateStale {
			return fmt.Errorf("Degraded %+v, x86_64 state %s", d, i.Status.Architectures[0].State)
		}
		return nil
	})
	serves(got.Status.KernelURL, newer.Kernel)
}
