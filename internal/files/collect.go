package files

import (
	"time"

	"imagecache.io/imagecache/internal/store"
)

// DefaultGrace is how long files of a replaced version stay in the store: a request that read the old
// version a moment before the switch still finds its file to open (once open, it reads it to the end
// whatever happens to the file).
const DefaultGrace = time.Minute

// collectLater removes, after the grace period, those of digests that no published set version and no
// image refers to.
func (m *Manager) collectLater(candidates []string) {
	if len(candidates) == 0 {
		return
	}
	time.AfterFunc(m.grace, func() { m.collect(candidates) })
}

func (m *Manager) collect(candidates []string) {
	inUse := map[string]bool{}
	m.mu.RLock()
	for _, s := range m.sets {
		for _, d := range digests(s.current.Load()) {
			inUse[d] = true
		}
	}
	m.mu.RUnlock()
	// Sets no longer served (a deleted resource's) still own their content until eviction decides.
	if names, err := m.store.Sets(); err == nil {
		for _, name := range names {
			if v, err := m.store.Set(name); err == nil {
				for _, d := range digests(&v) {
					inUse[d] = true
				}
			}
		}
	}
	var removed int
	var freed int64
	for _, d := range candidates {
		if inUse[d] || m.store.LinkedAnywhere(d) {
			continue
		}
		obj, err := m.store.Stat(d)
		if err != nil {
			continue // already gone
		}
		if err := m.store.Remove(d); err != nil {
			m.log.Warn("remove unused file-set content", "digest", d, "error", err)
			continue
		}
		inUse[d] = true // listed twice: removed once
		removed++
		freed += obj.Size
	}
	if removed > 0 {
		m.log.Info("removed files of replaced file-set versions", "objects", removed, "bytes", freed)
	}
}

// digests lists the content a set version refers to.
func digests(v *store.SetVersion) []string {
	if v == nil {
		return nil
	}
	out := make([]string, 0, len(v.Files))
	for _, f := range v.Files {
		out = append(out, f.Digest)
	}
	return out
}
