package files

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/store"
)

// State is where a set stands, as reported in its status.
type State string

const (
	Pending State = "Pending" // never published; the first attempt is running
	Ready   State = "Ready"   // the last attempt succeeded
	Stale   State = "Stale"   // the last attempt failed; the last published version is served
	Failed  State = "Failed"  // never published, and the last attempt failed
)

// set is one configured file set: its published version (read lock-free by every request) and the state
// of its refreshes (one at a time).
type set struct {
	cfg     config.FileSet
	recipe  string
	current atomic.Pointer[store.SetVersion]
	stop    context.CancelFunc // ends the refresh loop; set when it starts

	refreshing sync.Mutex // one refresh at a time

	mu        sync.Mutex // guards the fields below
	lastErr   error
	attempted bool
	nextCheck time.Time
	tooOld    bool
}

func newSet(cfg config.FileSet) *set {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00", cfg.URL, cfg.SHA256, cfg.ChecksumURL, cfg.Architecture)
	for _, r := range cfg.Extract {
		fmt.Fprintf(h, "%s\x00%s\x00", r.From, r.To)
	}
	return &set{cfg: cfg, recipe: hex.EncodeToString(h.Sum(nil))[:16], stop: func() {}}
}

func (s *set) state() (State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	published := s.current.Load() != nil
	switch {
	case s.lastErr != nil && published:
		return Stale, s.lastErr
	case s.lastErr != nil:
		return Failed, s.lastErr
	case published:
		return Ready, nil
	}
	return Pending, nil
}

// refresh makes one attempt to bring the set up to date and publishes a new version if the files changed.
func (m *Manager) refresh(ctx context.Context, s *set) error {
	s.refreshing.Lock()
	defer s.refreshing.Unlock()
	err := m.attempt(ctx, s)
	s.mu.Lock()
	s.lastErr, s.attempted = err, true
	s.mu.Unlock()
	if err != nil {
		m.log.Warn("file set refresh failed", "set", s.cfg.Set, "source", s.cfg.URL, "error", err)
	}
	if m.OnChange != nil {
		m.OnChange(s.cfg.Set)
	}
	return err
}

func (m *Manager) attempt(ctx context.Context, s *set) error {
	cur := s.current.Load()
	if isOCI(s.cfg.URL) {
		return m.attemptOCI(ctx, s, cur)
	}
	cond := s.conditional(cur)
	sink := &storeSink{st: m.store}
	// Whatever this attempt wrote and did not publish, and whatever the version it replaces used, goes once
	// nothing refers to it any more.
	defer func() { m.collectLater(append(sink.written, digests(cur)...)) }()
	dl, err := m.fetcher.Fetch(ctx, Source{URL: s.cfg.URL, SHA256: s.cfg.SHA256, ChecksumURL: s.cfg.ChecksumURL, Extract: s.cfg.Extract}, cond, sink)
	if err != nil {
		return err
	}
	src := store.SetSource{URL: s.cfg.URL, ETag: dl.ETag, LastModified: dl.LastModified, Digest: dl.SourceDigest, Recipe: s.recipe}
	if dl.NotModified {
		src = cur.Source // a 304 may omit validators; keep the ones the content came with
	}
	s.mu.Lock()
	s.tooOld = olderThan(src.LastModified, s.cfg.MinimumModificationTime)
	s.mu.Unlock()
	if dl.NotModified {
		return m.confirm(s, cur)
	}
	return m.publish(s, cur, src, dl.Files)
}

// conditional is what to send with the next download: nothing when there is no usable previous copy, when
// the config changed how files are made, or when the copy is older than minimumModificationTime.
func (s *set) conditional(cur *store.SetVersion) Conditional {
	if cur == nil || cur.Source.Recipe != s.recipe {
		return Conditional{}
	}
	if olderThan(cur.Source.LastModified, s.cfg.MinimumModificationTime) {
		return Conditional{}
	}
	return Conditional{ETag: cur.Source.ETag, LastModified: cur.Source.LastModified}
}

// olderThan reports whether an HTTP Last-Modified value is before min (an unparsable or missing one counts
// as older, so that a minimum is never silently ignored).
func olderThan(lastModified string, min time.Time) bool {
	if min.IsZero() {
		return false
	}
	t, err := http.ParseTime(lastModified)
	return err != nil || t.Before(min)
}

// confirm records that the upstream still serves the published version.
func (m *Manager) confirm(s *set, cur *store.SetVersion) error {
	v := *cur
	v.CheckedAt = time.Now().UTC()
	if err := m.store.PutSet(s.cfg.Set, v); err != nil {
		return err
	}
	s.current.Store(&v)
	return nil
}

// publish makes files the set's version, all in one index transaction. A file whose content did not change
// keeps its Last-Modified; a changed one takes the upstream's Last-Modified (or now).
func (m *Manager) publish(s *set, cur *store.SetVersion, src store.SetSource, files []Published) error {
	now := time.Now().UTC().Truncate(time.Second)
	modified := now
	if t, err := http.ParseTime(src.LastModified); err == nil && !t.After(now) {
		modified = t.UTC()
	}
	v := store.SetVersion{Version: 1, Files: map[string]store.SetFile{}, Source: src, PublishedAt: now, CheckedAt: now}
	changed := cur == nil || len(cur.Files) != len(files)
	for _, f := range files {
		sf := store.SetFile{Digest: f.Digest, Size: f.Size, LastModified: modified}
		if cur != nil {
			old, ok := cur.Files[f.Name]
			switch {
			case ok && old.Digest == f.Digest:
				sf.LastModified = old.LastModified
			case ok && !sf.LastModified.After(old.LastModified):
				// New content under a date that is not newer (reproducible builds stamp every build alike):
				// a client asking If-Modified-Since would keep the old bytes, so the date must move.
				sf.LastModified = now
				if !now.After(old.LastModified) {
					sf.LastModified = old.LastModified.Add(time.Second)
				}
				changed = true
			default:
				changed = true
			}
		}
		v.Files[f.Name] = sf
	}
	if cur != nil {
		v.Version = cur.Version
		if changed {
			v.Version++
		} else {
			v.PublishedAt = cur.PublishedAt
		}
	}
	if err := m.store.PutSet(s.cfg.Set, v); err != nil {
		return err
	}
	s.current.Store(&v)
	if changed {
		attrs := []any{"set", s.cfg.Set, "version", v.Version, "source", src.URL}
		for name, f := range v.Files {
			attrs = append(attrs, name, fmt.Sprintf("%s (%d bytes)", f.Digest, f.Size))
		}
		m.log.Info("published file set", attrs...)
	}
	return nil
}
