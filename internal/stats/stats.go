// Package stats keeps, in memory, what an operator wants at a glance and Prometheus does not answer by
// itself: hit ratio and bytes by source for the last hour (per minute), each upstream's health, and the most
// recent stale answers and errors. It is cheap enough to update on every request.
package stats

import (
	"sync"
	"time"
)

// Counts are request and byte totals.
type Counts struct {
	Hits              int64 `json:"hits"`
	Misses            int64 `json:"misses"`
	Revalidated       int64 `json:"revalidated"`
	Stale             int64 `json:"stale"`
	Errors            int64 `json:"errors"`
	BytesFromCache    int64 `json:"bytesFromCache"`
	BytesFromUpstream int64 `json:"bytesFromUpstream"`
}

// HitRatio is the share of answers served without transferring content from the upstream (hits,
// revalidations and stale answers), or 0 when there were none.
func (c Counts) HitRatio() float64 {
	served := c.Hits + c.Revalidated + c.Stale
	if total := served + c.Misses; total > 0 {
		return float64(served) / float64(total)
	}
	return 0
}

// Minute is one minute of Counts.
type Minute struct {
	Start time.Time `json:"start"`
	Counts
}

// Upstream is one upstream's health as seen from its requests.
type Upstream struct {
	Name        string    `json:"name"`
	Requests    int64     `json:"requests"`
	Errors      int64     `json:"errors"` // no answer, 5xx or 429
	LastSuccess time.Time `json:"lastSuccess,omitzero"`
	LastError   time.Time `json:"lastError,omitzero"`
	LastMessage string    `json:"lastErrorMessage,omitempty"`
}

// Healthy is true when the last request succeeded (or none failed).
func (u Upstream) Healthy() bool { return u.LastError.IsZero() || u.LastSuccess.After(u.LastError) }

// Event is a stale answer or an error, for the list of recent ones.
type Event struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"` // stale or error
	API     string    `json:"api"`
	Name    string    `json:"name"` // what was asked for: upstream/repository:ref, or a file set
	Message string    `json:"message"`
}

// Snapshot is a consistent copy of everything.
type Snapshot struct {
	Since     time.Time  `json:"since"`
	Total     Counts     `json:"total"`
	LastHour  Counts     `json:"lastHour"`
	Minutes   []Minute   `json:"minutes"` // the last 60, oldest first, empty minutes included
	Upstreams []Upstream `json:"upstreams"`
	Recent    []Event    `json:"recent"` // newest first
}

const (
	keepMinutes = 60
	keepEvents  = 50
)

// Stats is safe for concurrent use.
type Stats struct {
	mu        sync.Mutex
	now       func() time.Time
	since     time.Time
	total     Counts
	minutes   [keepMinutes]Minute
	upstreams map[string]*Upstream
	order     []string
	recent    []Event // ring, next at len%keepEvents once full
	next      int
}

// New starts counting now.
func New() *Stats {
	return &Stats{now: time.Now, since: time.Now(), upstreams: map[string]*Upstream{}}
}

// minute returns the bucket for now, resetting it if it holds an older minute.
func (s *Stats) minute() *Minute {
	start := s.now().Truncate(time.Minute)
	m := &s.minutes[start.Unix()/60%keepMinutes]
	if !m.Start.Equal(start) {
		*m = Minute{Start: start}
	}
	return m
}

// Request counts an answer: result is hit, miss, revalidated, stale or error.
func (s *Stats) Request(result string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range []*Counts{&s.total, &s.minute().Counts} {
		switch result {
		case "hit":
			c.Hits++
		case "miss":
			c.Misses++
		case "revalidated":
			c.Revalidated++
		case "stale":
			c.Stale++
		case "error":
			c.Errors++
		}
	}
}

// Bytes counts content sent to clients, by where it came from.
func (s *Stats) Bytes(fromCache bool, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range []*Counts{&s.total, &s.minute().Counts} {
		if fromCache {
			c.BytesFromCache += n
		} else {
			c.BytesFromUpstream += n
		}
	}
}

// Upstream records the outcome of one request to an upstream; failed means no answer, 5xx or 429.
func (s *Stats) Upstream(name string, failed bool, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.upstreams[name]
	if !ok {
		u = &Upstream{Name: name}
		s.upstreams[name] = u
		s.order = append(s.order, name)
	}
	u.Requests++
	if failed {
		u.Errors++
		u.LastError, u.LastMessage = s.now(), message
	} else {
		u.LastSuccess = s.now()
	}
}

// Problem records a stale answer or an error.
func (s *Stats) Problem(kind, api, name, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := Event{Time: s.now(), Kind: kind, API: api, Name: name, Message: message}
	if len(s.recent) < keepEvents {
		s.recent = append(s.recent, e)
		return
	}
	s.recent[s.next] = e
	s.next = (s.next + 1) % keepEvents
}

// Snapshot copies everything.
func (s *Stats) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{Since: s.since, Total: s.total}
	start := s.now().Truncate(time.Minute).Add(-(keepMinutes - 1) * time.Minute)
	for i := range keepMinutes {
		at := start.Add(time.Duration(i) * time.Minute)
		m := s.minutes[at.Unix()/60%keepMinutes]
		if !m.Start.Equal(at) {
			m = Minute{Start: at}
		}
		snap.Minutes = append(snap.Minutes, m)
		add(&snap.LastHour, m.Counts)
	}
	for _, name := range s.order {
		snap.Upstreams = append(snap.Upstreams, *s.upstreams[name])
	}
	for i := range s.recent {
		// newest first: walk the ring backwards from the last written
		j := (s.next - 1 - i + 2*len(s.recent)) % len(s.recent)
		if len(s.recent) < keepEvents {
			j = len(s.recent) - 1 - i
		}
		snap.Recent = append(snap.Recent, s.recent[j])
	}
	return snap
}

func add(to *Counts, c Counts) {
	to.Hits += c.Hits
	to.Misses += c.Misses
	to.Revalidated += c.Revalidated
	to.Stale += c.Stale
	to.Errors += c.Errors
	to.BytesFromCache += c.BytesFromCache
	to.BytesFromUpstream += c.BytesFromUpstream
}
