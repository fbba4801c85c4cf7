package policy

import (
	"testing"
	"time"
)

func TestDecideTag(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	tests := []struct {
		name      string
		rule      Rule
		cached    bool
		checkedAt time.Time
		want      Action
	}{
		{"absent Always", Rule{Pull: Always}, false, time.Time{}, Fetch},
		{"absent IfNotPresent", Rule{Pull: IfNotPresent}, false, time.Time{}, Fetch},
		{"absent Never", Rule{Pull: Never}, false, time.Time{}, Forbid},
		{"cached IfNotPresent", Rule{Pull: IfNotPresent}, true, time.Time{}, Serve},
		{"cached Never", Rule{Pull: Never}, true, time.Time{}, Serve},
		{"cached Always no revalidateAfter", Rule{Pull: Always}, true, now, Check},
		{"cached Always fresh", Rule{Pull: Always, RevalidateAfter: time.Minute}, true, ago(30 * time.Second), Serve},
		{"cached Always exactly expired", Rule{Pull: Always, RevalidateAfter: time.Minute}, true, ago(time.Minute), Check},
		{"cached Always stale", Rule{Pull: Always, RevalidateAfter: time.Minute}, true, ago(time.Hour), Check},
		{"cached Always never checked", Rule{Pull: Always, RevalidateAfter: time.Minute}, true, time.Time{}, Check},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DecideTag(tt.rule, tt.cached, tt.checkedAt, now); got != tt.want {
				t.Errorf("DecideTag = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestDecideDigest(t *testing.T) {
	tests := []struct {
		pull   Pull
		cached bool
		want   Action
	}{
		{Always, true, Serve},
		{IfNotPresent, true, Serve},
		{Never, true, Serve},
		{Always, false, Fetch},
		{IfNotPresent, false, Fetch},
		{Never, false, Forbid},
	}
	for _, tt := range tests {
		if got := DecideDigest(Rule{Pull: tt.pull}, tt.cached); got != tt.want {
			t.Errorf("DecideDigest(%s, cached=%v) = %s, want %s", tt.pull, tt.cached, got, tt.want)
		}
	}
}

func TestActionString(t *testing.T) {
	for a, want := range map[Action]string{Serve: "Serve", Check: "Check", Fetch: "Fetch", Forbid: "Forbid", 0: "Action(0)"} {
		if got := a.String(); got != want {
			t.Errorf("Action(%d).String() = %q, want %q", int(a), got, want)
		}
	}
}
