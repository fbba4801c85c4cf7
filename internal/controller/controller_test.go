package controller

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"imagecache.io/imagecache/api/v1alpha1"
)

func TestWorthReconciling(t *testing.T) {
	base := func() *v1alpha1.ImageCache {
		return &v1alpha1.ImageCache{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "n", Generation: 1,
			Finalizers: []string{finalizer}, Annotations: map[string]string{"x": "1"}}}
	}
	now := metav1.Now()
	for _, tt := range []struct {
		name   string
		change func(*v1alpha1.ImageCache)
		want   bool
	}{
		{"status write", func(ic *v1alpha1.ImageCache) { ic.Status.CachedImages = "1/1" }, false},
		{"spec change", func(ic *v1alpha1.ImageCache) { ic.Generation = 2 }, true},
		{"annotation", func(ic *v1alpha1.ImageCache) { ic.Annotations["x"] = "2" }, true},
		{"deletion starts", func(ic *v1alpha1.ImageCache) { ic.DeletionTimestamp = &now }, true},
		{"finalizer removed by someone", func(ic *v1alpha1.ImageCache) { ic.Finalizers = nil }, true},
		{"another finalizer added", func(ic *v1alpha1.ImageCache) { ic.Finalizers = append(ic.Finalizers, "other") }, false},
	} {
		old, updated := base(), base()
		tt.change(updated)
		if got := worthReconciling().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: updated}); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	if !worthReconciling().Create(event.CreateEvent{Object: base()}) || !worthReconciling().Delete(event.DeleteEvent{Object: base()}) {
		t.Error("creation and deletion must reconcile")
	}
}

func TestRefreshIntervalBounds(t *testing.T) {
	for in, want := range map[time.Duration]time.Duration{
		0: defaultRefresh, -5 * time.Minute: defaultRefresh, 10 * time.Millisecond: minRefresh,
		10 * time.Second: 10 * time.Second, 2 * time.Hour: 2 * time.Hour,
	} {
		if got := refreshInterval(&metav1.Duration{Duration: in}); got != want {
			t.Errorf("refreshInterval(%v) = %v, want %v", in, got, want)
		}
	}
	if got := refreshInterval(nil); got != defaultRefresh {
		t.Errorf("refreshInterval(nil) = %v", got)
	}
}

func TestSummarizeCountsStaleAsCached(t *testing.T) {
	st := v1alpha1.ImageCacheStatus{ObservedGeneration: 3, Images: []v1alpha1.ImageStatus{
		{Ref: "a", State: v1alpha1.StateCached, Size: 10},
		{Ref: "b", State: v1alpha1.StateStale, Size: 20, Message: "upstream down"},
	}, Files: []v1alpha1.FileSetStatus{{Name: "f", State: v1alpha1.StateStale, Files: []v1alpha1.ServedFile{{Size: 5}}}}}
	summarize(&st, 2, imageProblems(st.Images))
	ready, degraded := condition(st.Conditions, v1alpha1.ConditionReady), condition(st.Conditions, v1alpha1.ConditionDegraded)
	if st.CachedImages != "2/2" || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != 3 {
		t.Errorf("cachedImages %s, Ready %+v: a stale image is cached", st.CachedImages, ready)
	}
	if degraded.Status != metav1.ConditionTrue || !strings.Contains(degraded.Message, "image b: upstream down") {
		t.Errorf("Degraded %+v", degraded)
	}
	if st.Size != "35 B" {
		t.Errorf("size %s, want 35 bytes", st.Size)
	}

	st.Images[1].State = v1alpha1.StateFailed
	summarize(&st, 2, imageProblems(st.Images))
	if c := condition(st.Conditions, v1alpha1.ConditionReady); st.CachedImages != "1/2" || c.Status != metav1.ConditionFalse {
		t.Errorf("with a failed image: cachedImages %s, Ready %+v", st.CachedImages, c)
	}
}

func TestImageChecksRecent(t *testing.T) {
	c := newImageChecks()
	key := types.NamespacedName{Namespace: "n", Name: "a"}
	t0 := time.Now()
	c.remember(key, imageCheck{inputs: "1|map[]|[]", at: t0})
	for _, tt := range []struct {
		name   string
		inputs string
		at     time.Time
		want   bool
	}{
		{"same inputs, soon after", "1|map[]|[]", t0.Add(5 * time.Second), true},
		{"spec changed", "2|map[]|[]", t0.Add(5 * time.Second), false},
		{"due", "1|map[]|[]", t0.Add(10 * time.Second), false},
		{"just before due", "1|map[]|[]", t0.Add(10*time.Second - checkSlack/2), false},
	} {
		if _, ok := c.recent(key, tt.inputs, 10*time.Second, tt.at); ok != tt.want {
			t.Errorf("%s: recent %v, want %v", tt.name, ok, tt.want)
		}
	}
	c.forget(key)
	if _, ok := c.recent(key, "1|map[]|[]", 10*time.Second, t0); ok {
		t.Error("a forgotten check is still used")
	}
}
