package eviction

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"imagecache.io/imagecache/internal/store"
)

// Plan is what one eviction run removes (or would remove, on a dry run).
type Plan struct {
	Limit           int64   `json:"limit"`           // storage.maxSize; 0 = unbounded
	Target          int64   `json:"target"`          // the low watermark the run evicts down to
	Before          int64   `json:"before"`          // bytes stored when the run started
	After           int64   `json:"after"`           // bytes stored when it ends
	PinnedBytes     int64   `json:"pinnedBytes"`     // bytes no run may remove
	PinnedOverLimit bool    `json:"pinnedOverLimit"` // pins alone exceed the limit
	Evicted         []*Unit `json:"evicted"`
	DryRun          bool    `json:"dryRun"`
}

// Evictor keeps the store under its limit.
type Evictor struct {
	st      *store.Store
	limit   int64
	low     float64
	log     *slog.Logger
	kick    chan struct{}
	running sync.Mutex // one run at a time
	OnRun   func(Plan) // metrics; called after every run that removed something
	// InFlight reports bytes being downloaded that will be stored: they count against the limit before
	// they land, so that the disk does not overshoot by a large blob.
	InFlight func() int64
	pinned   atomic.Int64
	over     atomic.Bool
	need     atomic.Int64 // bytes a full disk asked to free, whatever the limit
}

// New makes an evictor for a limit (0: unbounded) and a low watermark (fraction of the limit).
func New(st *store.Store, limit int64, low float64, log *slog.Logger) *Evictor {
	if low <= 0 || low >= 1 {
		low = 0.9
	}
	return &Evictor{st: st, limit: limit, low: low, log: log, kick: make(chan struct{}, 1)}
}

// Kick asks for a run soon; it never blocks.
func (e *Evictor) Kick() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// Start runs eviction in the background whenever the store passes its limit (the store calls back on every
// growth) and once a minute, until ctx ends. It never blocks serving.
func (e *Evictor) Start(ctx context.Context) {
	e.st.OnGrow(func(int64) {
		if e.overLimit() {
			e.Kick()
		}
	})
	go func() {
		tick := time.NewTicker(time.Minute)
		defer tick.Stop()
		e.Kick() // a limit lowered since the last start applies at once
		for {
			select {
			case <-ctx.Done():
				return
			case <-e.kick:
			case <-tick.C:
			}
			if !e.overLimit() && e.need.Load() == 0 {
				continue
			}
			if _, err := e.Run(false); err != nil {
				e.log.Error("eviction failed", "error", err)
			}
		}
	}()
}

func (e *Evictor) inFlight() int64 {
	if e.InFlight == nil {
		return 0
	}
	return e.InFlight()
}

func (e *Evictor) overLimit() bool {
	bytes, _ := e.st.Usage()
	return e.limit > 0 && bytes+e.inFlight() > e.limit
}

// FreeLater asks the background loop to free need bytes even when the store is under its limit: the disk
// filled up first (it is smaller than storage.maxSize, or shared). It never blocks.
func (e *Evictor) FreeLater(need int64) {
	for {
		cur := e.need.Load()
		if need <= cur || e.need.CompareAndSwap(cur, need) {
			break
		}
	}
	e.Kick()
}

// MakeRoom makes space on the filesystem for need more bytes before a download is accepted. When less is
// free it evicts now, but only if that frees enough: a blob that cannot fit is refused without emptying the
// cache for nothing.
func (e *Evictor) MakeRoom(need int64) error {
	const margin = 8 << 20 // the index and directory entries need a little room too
	if e.limit > 0 && need > e.limit {
		return fmt.Errorf("%w: it is %d bytes, more than storage.maxSize (%d)", ErrLargerThanLimit, need, e.limit)
	}
	avail, err := e.st.Available()
	if err != nil {
		return nil // cannot tell: let the write itself find out
	}
	// Other downloads in progress will take their share of what is free now. (The caller has already
	// added its own download to the in-flight bytes.)
	avail -= max(0, e.inFlight()-need)
	if avail >= need+margin {
		return nil
	}
	short := need + margin - avail
	_, err = e.run(false, short, func(p Plan) error {
		if freed := p.Before - p.After; freed < short {
			return fmt.Errorf("the storage filesystem has %d bytes free and evicting all unpinned content would free only %d more, not enough for %d (and the %d bytes kept free for the index); nothing was evicted", avail, freed, need, margin)
		}
		return nil
	})
	return err
}

// ErrLargerThanLimit is MakeRoom's answer for an object larger than storage.maxSize: it can never be kept,
// only passed through.
var ErrLargerThanLimit = errors.New("larger than the cache's size limit")

// PinStatus reports the pinned bytes and whether they alone exceed the limit (as of the last run).
func (e *Evictor) PinStatus() (int64, bool) { return e.pinned.Load(), e.over.Load() }

// Run evicts least recently used units down to the low watermark (when over the limit), or only says what
// it would evict when dryRun is set.
func (e *Evictor) Run(dryRun bool) (Plan, error) { return e.run(dryRun, e.need.Swap(0), nil) }

// run plans eviction down to the low watermark, or further when need bytes must be freed whatever the
// limit; accept, when set, may refuse to carry the plan out.
func (e *Evictor) run(dryRun bool, need int64, accept func(Plan) error) (Plan, error) {
	e.running.Lock()
	defer e.running.Unlock()
	start := time.Now()
	// Watch before the snapshot: a manifest stored from here on is either in the snapshot or heard of.
	keep := newKeeper()
	stop := e.st.WatchManifests(keep.manifestStored)
	defer stop()
	if err := e.st.FlushAccessTimes(); err != nil {
		return Plan{}, fmt.Errorf("write access times: %w", err)
	}
	g, err := snapshot(e.st)
	if err != nil {
		return Plan{}, err
	}
	if err := g.pin(e.st); err != nil {
		return Plan{}, err
	}
	target := int64(float64(e.limit)*e.low) - e.inFlight()
	if need > 0 {
		var total int64
		for _, o := range g.objects {
			total += o.Size
		}
		if e.limit <= 0 || total-need < target {
			target = total - need
		}
	}
	p := g.plan(e.limit, target, need > 0)
	p.DryRun = dryRun
	e.pinned.Store(p.PinnedBytes)
	e.over.Store(p.PinnedOverLimit)
	if p.PinnedOverLimit {
		e.log.Error("pinned content alone exceeds storage.maxSize: nothing pinned is evicted, so the store stays over its limit; raise maxSize or pin less",
			"pinnedBytes", p.PinnedBytes, "maxSize", e.limit)
	}
	if accept != nil {
		if err := accept(p); err != nil {
			return p, err
		}
	}
	if dryRun || len(p.Evicted) == 0 {
		return p, nil
	}
	keep.graph = g
	evicted := p.Evicted[:0]
	for _, u := range p.Evicted {
		kept, inUse, err := e.remove(u, start, keep)
		if err != nil {
			return p, err
		}
		p.After += kept
		if !inUse {
			evicted = append(evicted, u)
		}
	}
	p.Evicted = evicted
	if len(p.Evicted) == 0 {
		return p, nil
	}
	e.log.Info("evicted", "units", len(p.Evicted), "freedBytes", p.Before-p.After, "storedBytes", p.After,
		"limit", p.Limit, "pinnedBytes", p.PinnedBytes, "took", time.Since(start).Round(time.Millisecond))
	if e.OnRun != nil {
		e.OnRun(p)
	}
	return p, nil
}

// remove deletes a unit: the records that name it first, then manifests before the blobs below them, so
// that a crash half-way leaves only unreferenced blobs (evicted by the next run), never a manifest with a
// hole in its graph. What changed since the plan was made is left alone: a unit used since then (someone is
// pulling it), and objects that a manifest stored since then needs. It returns the bytes it kept, and
// whether it left the whole unit alone because it is in use.
func (e *Evictor) remove(u *Unit, planned time.Time, keep *keeper) (kept int64, inUse bool, err error) {
	if used, ok := e.st.LastUse(u.Root); ok && used.After(planned) {
		e.log.Debug("not evicting: used since the plan", "kind", u.Kind, "name", u.Name)
		return u.Bytes, true, nil
	}
	if u.set != "" {
		if err := e.st.DeleteSet(u.set); err != nil {
			return kept, false, fmt.Errorf("evict %s: %w", u.Name, err)
		}
	}
	if len(u.Objects) > 0 && u.Objects[0] == u.Root {
		for _, t := range u.tags {
			if err := e.st.DeleteTagIf(t, u.Root); err != nil {
				return kept, false, fmt.Errorf("evict %s: %w", u.Name, err)
			}
		}
	}
	for _, d := range u.Objects {
		removed, size, err := keep.removeUnlessNeeded(e.st, d)
		if err != nil {
			return kept, false, fmt.Errorf("evict %s: %w", u.Name, err)
		}
		if !removed {
			kept += size
		}
	}
	e.log.Debug("evicted unit", "kind", u.Kind, "name", u.Name, "bytes", u.Bytes-kept, "lastUse", u.LastUse)
	return kept, false, nil
}

// keeper remembers, during a run, what manifests stored after the snapshot refer to: removing any of it
// would leave a new manifest (already served, its blobs perhaps fetched from the cache) with a hole.
type keeper struct {
	mu     sync.Mutex
	needed map[string]bool
	fresh  []string // needed, but their graphs in the snapshot not yet added to needed
	graph  *graph   // the run's snapshot: a needed manifest needs its own graph too
}

func newKeeper() *keeper { return &keeper{needed: map[string]bool{}} }

func (k *keeper) manifestStored(_ string, body []byte) {
	var refs manifestRefs
	if json.Unmarshal(body, &refs) != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range refs.children() {
		if !k.needed[c] {
			k.needed[c] = true
			k.fresh = append(k.fresh, c)
		}
	}
}

// removeUnlessNeeded removes d unless a manifest stored since the snapshot needs it. Holding the lock
// while removing orders the two: a manifest stored after d is gone finds it missing when its pull asks
// for it, and fetches it again.
func (k *keeper) removeUnlessNeeded(st *store.Store, d string) (removed bool, size int64, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	size = k.graph.objects[d].Size
	if k.neededLocked(d) {
		return false, size, nil
	}
	if err := st.Remove(d); err != nil {
		return false, size, err
	}
	return true, size, st.Unlink(d)
}

func (k *keeper) neededLocked(d string) bool {
	// A new index may name a platform manifest the snapshot has: its blobs are needed as well. Each needed
	// digest's graph is added once, when the next removal asks.
	for _, n := range k.fresh {
		for _, c := range closure(n, k.graph.children) {
			k.needed[c] = true
		}
	}
	k.fresh = k.fresh[:0]
	return k.needed[d]
}

// pin marks everything reachable from a pinned reference.
func (g *graph) pin(st *store.Store) error {
	pins, err := st.Pins()
	if err != nil {
		return fmt.Errorf("read pins: %w", err)
	}
	for _, p := range pins {
		for _, d := range g.resolve(st, p.Reference) {
			for _, c := range closure(d, g.children) {
				g.pinned[c] = true
			}
		}
		if set, ok := strings.CutPrefix(p.Reference, "files/"); ok {
			for _, u := range g.units {
				if u.set == set {
					for _, d := range u.closure {
						g.pinned[d] = true
					}
				}
			}
		}
	}
	return nil
}

// resolve turns upstream/repository:tag or upstream/repository@digest into stored digests.
func (g *graph) resolve(st *store.Store, ref string) []string {
	up, rest, ok := strings.Cut(ref, "/")
	if !ok {
		return nil
	}
	if repo, d, ok := strings.Cut(rest, "@"); ok && repo != "" {
		if _, stored := g.objects[d]; stored {
			return []string{d}
		}
		return nil
	}
	i := strings.LastIndex(rest, ":")
	if i < 0 {
		return nil
	}
	t, err := st.Tag(up, rest[:i], rest[i+1:])
	if err != nil {
		return nil
	}
	return []string{t.Digest}
}

// plan walks unpinned units, least recently used first, until the total is at target. An object leaves
// with the last unit that uses it.
func (g *graph) plan(limit, target int64, force bool) Plan {
	var total int64
	for _, o := range g.objects {
		total += o.Size
	}
	p := Plan{Limit: limit, Target: target, Before: total}
	for d := range g.pinned {
		p.PinnedBytes += g.objects[d].Size
	}
	p.PinnedOverLimit = limit > 0 && p.PinnedBytes > limit
	if !force && (limit <= 0 || total <= limit) {
		p.After = total
		return p
	}
	candidates := slices.Clone(g.units)
	slices.SortFunc(candidates, func(a, b *Unit) int {
		if c := a.LastUse.Compare(b.LastUse); c != 0 {
			return c
		}
		return strings.Compare(a.Root, b.Root)
	})
	for _, u := range candidates {
		if total <= target {
			break
		}
		if g.pinned[u.Root] || (u.set != "" && allPinned(u.closure, g.pinned)) {
			u.Pinned = true
			continue
		}
		for _, d := range u.closure {
			g.refcount[d]--
			if g.refcount[d] == 0 && !g.pinned[d] {
				u.Objects = append(u.Objects, d)
				u.Bytes += g.objects[d].Size
			}
		}
		total -= u.Bytes
		p.Evicted = append(p.Evicted, u)
	}
	p.After = total
	return p
}

func allPinned(ds []string, pinned map[string]bool) bool {
	for _, d := range ds {
		if !pinned[d] {
			return false
		}
	}
	return len(ds) > 0
}
