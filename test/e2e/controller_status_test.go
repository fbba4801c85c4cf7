package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"imagecache.io/imagecache/api/v1alpha1"
	"imagecache.io/imagecache/test/faultproxy"
)

// poke changes an annotation: a watch event that asks for a reconcile (and a check) now.
func poke(t *testing.T, k *cluster, obj client.Object, value string) {
	t.Helper()
	ctx := context.Background()
	if err := k.client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	obj.SetAnnotations(map[string]string{"test/poke": value})
	if err := k.client.Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
}

// waitEvent waits for an event on the named object with this reason whose message contains want.
func waitEvent(t *testing.T, k *cluster, name, eventType, reason, want string) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("a %s event %s mentioning %s", eventType, reason, want), func() error {
		var events corev1.EventList
		if err := k.client.List(context.Background(), &events, client.InNamespace("default")); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == name && e.Type == eventType && e.Reason == reason && strings.Contains(e.Message, want) {
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(events.Items))
	})
}

// TestImageCacheStaleImageIsReady: an image whose upstream is down is still cached and served, so the
// resource stays Ready (and counts it), while Degraded says it could not be checked.
func TestImageCacheStaleImageIsReady(t *testing.T) {
	k := startCluster(t)
	reg := startRegistry(t, registryOpts{})
	pushImage(t, reg.Host, "team/app:v1", "oci", 1, 1024)
	px := startProxy(t, reg.URL)
	k.startCache(t, fmt.Sprintf("upstreams:\n  - {name: upstream.test, url: %q}\n", px.URL()))
	ic := newImageCache("stale", "upstream.test/team/app:v1")
	if err := k.client.Create(context.Background(), ic); err != nil {
		t.Fatal(err)
	}
	waitReady(t, k, ic, "Ready")

	px.Refuse()
	poke(t, k, ic, "upstream-down")
	got := waitImageCache(t, k, client.ObjectKeyFromObject(ic), "the image reported stale", func(ic *v1alpha1.ImageCache) error {
		if len(ic.Status.Images) != 1 || ic.Status.Images[0].State != v1alpha1.StateStale {
			return fmt.Errorf("images %+v, want the one stale", ic.Status.Images)
		}
		return nil
	})
	if err := readyIs(got.Status.Conditions, metav1.ConditionTrue, got.Generation); err != nil {
		t.Error(err)
	}
	if d := condition(got.Status.Conditions, v1alpha1.ConditionDegraded); d == nil || d.Status != metav1.ConditionTrue || !strings.Contains(d.Message, "upstream.test/team/app:v1") {
		t.Errorf("Degraded %+v, want True naming the stale image", d)
	}
	if got.Status.CachedImages != "1/1" {
		t.Errorf("cachedImages %q, want 1/1: a stale image is cached", got.Status.CachedImages)
	}
}

// TestImageCacheEventOnTagMove: a tag that moves to a new digest is fetched again and says so in an Event.
func TestImageCacheEventOnTagMove(t *testing.T) {
	k := startCluster(t)
	reg := startRegistry(t, registryOpts{})
	d1, _ := pushImage(t, reg.Host, "team/app:v1", "oci", 1, 1024)
	k.startCache(t, fmt.Sprintf("upstreams:\n  - {name: upstream.test, url: %q}\n", reg.URL))
	ic := newImageCache("moving", "upstream.test/team/app:v1")
	if err := k.client.Create(context.Background(), ic); err != nil {
		t.Fatal(err)
	}
	waitReady(t, k, ic, "Ready")
	d2, _ := pushImage(t, reg.Host, "team/app:v1", "oci", 1, 1024)
	if d2 == d1 {
		t.Fatal("the new push has the old digest")
	}
	poke(t, k, ic, "moved")
	waitImageCache(t, k, client.ObjectKeyFromObject(ic), "the new digest in status", func(ic *v1alpha1.ImageCache) error {
		if len(ic.Status.Images) != 1 || ic.Status.Images[0].Digest != d2 {
			return fmt.Errorf("images %+v, want digest %s", ic.Status.Images, d2)
		}
		return nil
	})
	waitEvent(t, k, "moving", corev1.EventTypeNormal, "Updated", d2)
}

// TestImageCacheOneCheckPerInterval: each image costs its upstream one HEAD per refreshInterval, whatever
// else makes the resource reconcile (its own status writes, its file set's refreshes); and new resources
// do not log update conflicts as errors.
func TestImageCacheOneCheckPerInterval(t *testing.T) {
	k := startCluster(t)
	reg := startRegistry(t, registryOpts{})
	pushImage(t, reg.Host, "team/counted:v1", "oci", 1, 1024)
	pushImage(t, reg.Host, "team/other:v1", "oci", 1, 1024)
	px := startProxy(t, reg.URL)
	site := startFileServer(t)
	site.Set("/tool.bin", randomBytes(t, 2048), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := k.startCache(t, fmt.Sprintf("upstreams:\n  - {name: upstream.test, url: %q}\n", px.URL()))
	const interval = 10 * time.Second
	counted := newImageCache("counted", "upstream.test/team/counted:v1")
	counted.Spec.RefreshInterval = &metav1.Duration{Duration: interval}
	counted.Spec.Files = []v1alpha1.FileSetSpec{{Name: "tool", URL: site.URL + "/tool.bin"}}
	resources := []*v1alpha1.ImageCache{counted}
	for i := range 3 {
		resources = append(resources, newImageCache(fmt.Sprintf("other-%d", i), "upstream.test/team/other:v1"))
	}
	for _, ic := range resources {
		if err := k.client.Create(context.Background(), ic); err != nil {
			t.Fatal(err)
		}
	}
	for _, ic := range resources {
		waitReady(t, k, ic, "Ready")
	}

	heads := func() int {
		n := 0
		for _, r := range px.Requests() {
			if r.Method == http.MethodHead && r.Kind == faultproxy.KindManifest && strings.Contains(r.Path, "/team/counted/") {
				n++
			}
		}
		return n
	}
	px.Reset()
	waitFor(t, interval+5*time.Second, "the first periodic check", func() error {
		if heads() == 0 {
			return errors.New("no HEAD yet")
		}
		return nil
	})
	// Checks are due at the first one and one interval later; a window of one and a half intervals must
	// hold exactly two.
	end := time.Now().Add(interval * 3 / 2)
	for time.Now().Before(end) {
		if n := heads(); n > 2 {
			t.Fatalf("%d HEADs for the image within %v of the first periodic check, want one per %v:\n%+v", n, interval*3/2, interval, px.Requests())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := heads(); n != 2 {
		t.Fatalf("%d HEADs for the image in one and a half refresh intervals, want 2", n)
	}
	if log := c.Log(); strings.Contains(log, "Operation cannot be fulfilled") {
		t.Errorf("update conflicts logged:\n%s", log[max(0, strings.Index(log, "Operation cannot be fulfilled")-300):])
	}
}

// TestIronicImageCacheOlderThanMinimumIsDegraded: the download site still has only an agent older than
// agentMinimumModificationTime. It is served (Ready), but Degraded says it is not what was asked for.
func TestIronicImageCacheOlderThanMinimumIsDegraded(t *testing.T) {
	k := startCluster(t)
	site := startFileServer(t)
	built := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	site.Set("/dib/ipa-centos9-master.tar.gz", newIPATarball(t).Tgz, built)
	k.startCache(t, "upstreams: []\n")
	minTime := metav1.NewTime(built.Add(24 * time.Hour))
	iic := &v1alpha1.IronicImageCache{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: "default"},
		Spec: v1alpha1.IronicImageCacheSpec{AgentDownloadURL: site.URL + "/dib", AgentMinimumModificationTime: &minTime}}
	if err := k.client.Create(context.Background(), iic); err != nil {
		t.Fatal(err)
	}
	waitIronic(t, k, types.NamespacedName{Namespace: "default", Name: "old"}, "served but Degraded", func(i *v1alpha1.IronicImageCache) error {
		if err := readyIs(i.Status.Conditions, metav1.ConditionTrue, i.Generation); err != nil {
			return err
		}
		d := condition(i.Status.Conditions, v1alpha1.ConditionDegraded)
		if d == nil || d.Status != metav1.ConditionTrue || !strings.Contains(d.Message, "agentMinimumModificationTime") {
			return fmt.Errorf("Degraded %+v, want True naming agentMinimumModificationTime", d)
		}
		return nil
	})
}
