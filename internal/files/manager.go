package files

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/policy"
	"imagecache.io/imagecache/internal/reference"
	"imagecache.io/imagecache/internal/store"
)

const (
	// DefaultRefreshInterval is how often a set is checked when its config does not say.
	DefaultRefreshInterval = time.Hour
	firstRetry             = time.Second
	maxRetry               = 5 * time.Minute
)

// Manager keeps the configured file sets fresh and serves them.
type Manager struct {
	store   *store.Store
	fetcher *Fetcher
	images  Images            // for oci:// sources; nil when there is no registry side
	router  *reference.Router // finds the upstream an oci:// source's host names
	log     *slog.Logger
	grace   time.Duration // before replaced files are removed

	// OnChange, when set, is called with a set's name after each of its refresh attempts (the controllers
	// follow the sets they created through it). It must not block.
	OnChange func(set string)

	mu    sync.RWMutex
	sets  map[string]*set
	order []string
	run   context.Context // set by Run; sets added later start their loops in it
}

// NewManager loads the published version of each set from the store, so that serving starts at once,
// before any refresh.
func NewManager(st *store.Store, sets []config.FileSet, images Images, router *reference.Router, log *slog.Logger) (*Manager, error) {
	if router == nil {
		router = reference.NewRouter(nil)
	}
	m := &Manager{store: st, fetcher: &Fetcher{}, images: images, router: router, log: log, sets: map[string]*set{}, grace: DefaultGrace}
	for _, cfg := range sets {
		s, err := m.load(cfg)
		if err != nil {
			return nil, err
		}
		m.sets[cfg.Set] = s
		m.order = append(m.order, cfg.Set)
	}
	return m, nil
}

// load makes a set for cfg with the version already published under its name, if any.
func (m *Manager) load(cfg config.FileSet) (*set, error) {
	s := newSet(cfg)
	v, err := m.store.Set(cfg.Set)
	switch {
	case err == nil:
		s.current.Store(&v)
	case !errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("load file set %s: %w", cfg.Set, err)
	}
	return s, nil
}

// Ensure serves the set cfg from now on (the custom resources' sets): a new set starts fetching at once; a
// changed one keeps serving its published version until the new recipe's first fetch replaces it.
func (m *Manager) Ensure(cfg config.FileSet) error {
	// The config file's rules were checked when it was read; a custom resource's arrive here unchecked, and a
	// broken glob would otherwise only ever be reported as matching nothing.
	for _, e := range cfg.Extract {
		if err := policy.ValidateGlob(e.From); err != nil {
			return fmt.Errorf("file set %s: extract from: %w", cfg.Set, err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.sets[cfg.Set]; ok {
		if reflect.DeepEqual(old.cfg, cfg) {
			return nil
		}
		old.stop()
	} else {
		m.order = append(m.order, cfg.Set)
	}
	s, err := m.load(cfg)
	if err != nil {
		return err
	}
	m.sets[cfg.Set] = s
	if m.run != nil {
		m.start(s)
	}
	return nil
}

// Remove stops serving the set and refreshing it. Its content stays in the store, evictable once unpinned.
func (m *Manager) Remove(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sets[name]; ok {
		s.stop()
		delete(m.sets, name)
		m.order = slices.DeleteFunc(m.order, func(n string) bool { return n == name })
	}
}

// Names lists the sets served, in the order they were added.
func (m *Manager) Names() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Clone(m.order)
}

func (m *Manager) get(name string) (*set, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s, ok := m.sets[name]
	return s, ok
}

// start runs s's refresh loop until the manager stops or the set is removed. Callers hold m.mu.
func (m *Manager) start(s *set) {
	ctx, cancel := context.WithCancel(m.run)
	s.stop = cancel
	go m.loop(ctx, s)
}

// Run refreshes every set now and then on its interval, retrying failures with capped exponential backoff,
// until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.run = ctx
	for _, name := range m.order {
		m.start(m.sets[name])
	}
}

func (m *Manager) loop(ctx context.Context, s *set) {
	interval := s.cfg.RefreshInterval
	if interval <= 0 {
		interval = DefaultRefreshInterval
	}
	retry := firstRetry
	for {
		wait := interval
		if err := m.refresh(ctx, s); err != nil {
			wait, retry = retry, min(retry*2, maxRetry)
		} else {
			retry = firstRetry
		}
		s.mu.Lock()
		s.nextCheck = time.Now().Add(wait).UTC().Truncate(time.Second)
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// Refresh runs one refresh of the named set now (after any running one) and returns its status.
func (m *Manager) Refresh(ctx context.Context, name string) (Status, error) {
	s, ok := m.get(name)
	if !ok {
		return Status{}, fmt.Errorf("no file set named %q", name)
	}
	err := m.refresh(ctx, s)
	return m.status(s), err
}

// Status is what is known of a set, as served at /files/<set>/.
type Status struct {
	Set                  string       `json:"set"`
	Source               string       `json:"source"`
	State                State        `json:"state"`
	Message              string       `json:"message"`
	Version              int          `json:"version"`
	PublishedAt          *time.Time   `json:"publishedAt,omitempty"`
	CheckedAt            *time.Time   `json:"checkedAt,omitempty"`
	NextCheck            *time.Time   `json:"nextCheck,omitempty"`
	UpstreamETag         string       `json:"upstreamETag,omitempty"`
	UpstreamLastModified string       `json:"upstreamLastModified,omitempty"`
	OlderThanMinimum     bool         `json:"olderThanMinimum"`
	Files                []FileStatus `json:"files"`
}

// FileStatus is one published file.
type FileStatus struct {
	Name         string    `json:"name"`
	URL          string    `json:"url"`
	Digest       string    `json:"digest"`
	Size         int64     `json:"size"`
	LastModified time.Time `json:"lastModified"`
}

// Statuses lists every set in config order.
func (m *Manager) Statuses() []Status {
	m.mu.RLock()
	sets := make([]*set, 0, len(m.order))
	for _, name := range m.order {
		sets = append(sets, m.sets[name])
	}
	m.mu.RUnlock()
	out := make([]Status, 0, len(sets))
	for _, s := range sets {
		out = append(out, m.status(s))
	}
	return out
}

// Status reports one set.
func (m *Manager) Status(name string) (Status, bool) {
	s, ok := m.get(name)
	if !ok {
		return Status{}, false
	}
	return m.status(s), true
}

func (m *Manager) status(s *set) Status {
	state, err := s.state()
	st := Status{Set: s.cfg.Set, Source: s.cfg.URL, State: state, Files: []FileStatus{}}
	if err != nil {
		st.Message = err.Error()
	}
	s.mu.Lock()
	st.OlderThanMinimum = s.tooOld
	if !s.nextCheck.IsZero() {
		next := s.nextCheck
		st.NextCheck = &next
	}
	s.mu.Unlock()
	if v := s.current.Load(); v != nil {
		st.Version = v.Version
		st.PublishedAt, st.CheckedAt = &v.PublishedAt, &v.CheckedAt
		st.UpstreamETag, st.UpstreamLastModified = v.Source.ETag, v.Source.LastModified
		for _, name := range sortedNames(v.Files) {
			f := v.Files[name]
			st.Files = append(st.Files, FileStatus{Name: name, URL: "/files/" + s.cfg.Set + "/" + name, Digest: f.Digest, Size: f.Size, LastModified: f.LastModified})
		}
	}
	return st
}
