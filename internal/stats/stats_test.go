package stats

import (
	"fmt"
	"testing"
	"time"
)

func TestCountsAndWindow(t *testing.T) {
	s := New()
	clock := time.Date(2026, 11, 29, 10, 0, 30, 0, time.UTC)
	s.now = func() time.Time { return clock }
	s.Request("miss")
	s.Bytes(false, 1000)
	clock = clock.Add(time.Minute)
	s.Request("hit")
	s.Request("hit")
	s.Request("stale")
	s.Bytes(true, 3000)
	snap := s.Snapshot()
	if snap.Total.Hits != 2 || snap.Total.Misses != 1 || snap.Total.Stale != 1 || snap.Total.BytesFromCache != 3000 {
		t.Fatalf("totals %+v", snap.Total)
	}
	if got := snap.Total.HitRatio(); got != 0.75 {
		t.Fatalf("hit ratio %v, want 0.75", got)
	}
	if len(snap.Minutes) != 60 || snap.Minutes[59].Hits != 2 || snap.Minutes[58].Misses != 1 {
		t.Fatalf("last minutes %+v %+v", snap.Minutes[58], snap.Minutes[59])
	}
	clock = clock.Add(2 * time.Hour) // everything falls out of the hour, not out of the totals
	snap = s.Snapshot()
	if snap.LastHour.Hits != 0 || snap.Total.Hits != 2 {
		t.Fatalf("after two hours: last hour %+v, total %+v", snap.LastHour, snap.Total)
	}
}

func TestUpstreamHealthAndRecent(t *testing.T) {
	s := New()
	s.Upstream("docker.io", false, "")
	s.Upstream("docker.io", true, "connection refused")
	snap := s.Snapshot()
	if u := snap.Upstreams[0]; u.Requests != 2 || u.Errors != 1 || u.Healthy() || u.LastMessage != "connection refused" {
		t.Fatalf("%+v", u)
	}
	for i := range 60 {
		s.Problem("error", "manifest", fmt.Sprintf("n%d", i), "boom")
	}
	snap = s.Snapshot()
	if len(snap.Recent) != 50 || snap.Recent[0].Name != "n59" || snap.Recent[49].Name != "n10" {
		t.Fatalf("recent: %d, first %s, last %s", len(snap.Recent), snap.Recent[0].Name, snap.Recent[len(snap.Recent)-1].Name)
	}
}
