package config

import (
	"encoding/hex"
	"regexp"
	"strings"
	"time"

	yaml "sigs.k8s.io/yaml/goyaml.v3"

	"imagecache.io/imagecache/internal/policy"
)

// FileSet is a group of plain HTTP files served together under /files/<set>/.
type FileSet struct {
	Set string
	// URL is http(s):// or oci:// (an artifact in a registry).
	URL string
	// SHA256 (64 lowercase hex) or ChecksumURL verifies the download; at
	// most one is set.
	SHA256      string
	ChecksumURL string
	// Extract publishes members of a tarball under new names; empty
	// publishes the download itself.
	Extract []Extract
	// RefreshInterval is how often to look for a new version; 0 leaves the
	// choice to the files package.
	RefreshInterval time.Duration
	// MinimumModificationTime forces a download when the cached copy is
	// older; zero when unset.
	MinimumModificationTime time.Time
	// Architecture picks the manifest of an oci:// image index (amd64 or
	// arm64, also spelled x86_64 and aarch64); default amd64.
	Architecture string
	// PullCredentials, for an oci:// source, replace the upstream's configured credentials: a custom
	// resource's pull secret. Never read from the config file.
	PullCredentials *Credentials
}

// NormalizeArchitecture maps the kernel's names for an architecture to the OCI
// ones, so that x86_64 and amd64 (aarch64 and arm64) mean the same.
func NormalizeArchitecture(a string) string {
	switch strings.ToLower(a) {
	case "", "amd64", "x86_64", "x86-64":
		return "amd64"
	case "arm64", "aarch64":
		return "arm64"
	}
	return strings.ToLower(a)
}

// Extract publishes the tarball member matching From (a glob, see
// policy.MatchGlob) as To.
type Extract struct {
	From, To string
}

// segment is what can appear as one /files/<set>/<file> path segment
// without escaping.
var segment = regexp.MustCompile(`^[A-Za-z0-9._~-]+$`)

func validSegment(s string) bool {
	return segment.MatchString(s) && s != "." && s != ".."
}

func (d *decoder) fileSets(n *yaml.Node, path string) []FileSet {
	var out []FileSet
	sets := map[string]string{}
	for i, item := range d.list(n, path) {
		p := index(path, i)
		fs := d.fileSet(item, p)
		if prev, ok := sets[fs.Set]; ok && fs.Set != "" {
			d.failf(item, field(p, "set"), "%q is already used by %s", fs.Set, prev)
		}
		sets[fs.Set] = p
		out = append(out, fs)
	}
	return out
}

func (d *decoder) fileSet(n *yaml.Node, path string) FileSet {
	var fs FileSet
	m := d.mapping(n, path, "set", "url", "sha256", "checksumURL", "extract", "refreshInterval", "minimumModificationTime", "architecture")
	if n.Kind != yaml.MappingNode && !isNull(n) {
		return fs
	}
	if v, ok := m["set"]; ok {
		fs.Set = d.str(v, field(path, "set"))
	}
	if !validSegment(fs.Set) {
		d.failf(at(m["set"], n), field(path, "set"), "%q is not a set name (want letters, digits, '.', '_', '~' or '-'; it becomes /files/<set>/)", fs.Set)
	}
	if v, ok := m["url"]; ok {
		fs.URL = d.str(v, field(path, "url"))
	}
	// Download links are often signed with a query string, so it is allowed.
	if err := checkURL(fs.URL, true, "http", "https", "oci"); err != nil {
		d.fail(at(m["url"], n), field(path, "url"), err)
	}
	d.checksum(m, n, path, &fs)
	if v, ok := m["extract"]; ok {
		fs.Extract = d.extracts(v, field(path, "extract"))
	}
	if v, ok := m["refreshInterval"]; ok {
		p := field(path, "refreshInterval")
		if dur, ok := d.duration(v, p); ok && dur < 0 {
			d.failf(v, p, "must not be negative")
		} else {
			fs.RefreshInterval = dur
		}
	}
	if v, ok := m["minimumModificationTime"]; ok {
		p := field(path, "minimumModificationTime")
		s := d.str(v, p)
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			d.failf(v, p, "%q is not an RFC 3339 time (write e.g. \"2026-01-01T00:00:00Z\")", s)
		}
		fs.MinimumModificationTime = t
	}
	fs.Architecture = "amd64"
	if v, ok := m["architecture"]; ok {
		p := field(path, "architecture")
		fs.Architecture = NormalizeArchitecture(d.str(v, p))
		if !segment.MatchString(fs.Architecture) {
			d.failf(v, p, "%q is not an architecture (want e.g. amd64, x86_64, arm64 or aarch64)", fs.Architecture)
		}
	}
	return fs
}

// at picks the node to blame: the value when there is one, else its parent.
func at(v, parent *yaml.Node) *yaml.Node {
	if v != nil {
		return v
	}
	return parent
}

func (d *decoder) checksum(m map[string]*yaml.Node, n *yaml.Node, path string, fs *FileSet) {
	if v, ok := m["sha256"]; ok {
		p := field(path, "sha256")
		fs.SHA256 = strings.ToLower(d.str(v, p))
		if _, err := hex.DecodeString(fs.SHA256); fs.SHA256 != "" && (err != nil || len(fs.SHA256) != 64) {
			d.failf(v, p, "%q is not a SHA-256 (want 64 hex digits)", fs.SHA256)
		}
	}
	if v, ok := m["checksumURL"]; ok {
		p := field(path, "checksumURL")
		fs.ChecksumURL = d.str(v, p)
		if fs.ChecksumURL == "" {
			return
		}
		if err := checkURL(fs.ChecksumURL, true, "http", "https"); err != nil {
			d.fail(v, p, err)
		}
		if fs.SHA256 != "" {
			d.failf(v, p, "cannot be used together with sha256; choose one")
		}
	}
}

func (d *decoder) extracts(n *yaml.Node, path string) []Extract {
	var out []Extract
	targets := map[string]string{}
	for i, item := range d.list(n, path) {
		p := index(path, i)
		m := d.mapping(item, p, "from", "to")
		var e Extract
		if v, ok := m["from"]; ok {
			e.From = d.str(v, field(p, "from"))
		}
		if e.From == "" {
			d.failf(at(m["from"], item), field(p, "from"), "required: a glob naming the tarball member, e.g. \"*.kernel\"")
		} else if err := policy.ValidateGlob(e.From); err != nil {
			d.fail(m["from"], field(p, "from"), err)
		}
		if v, ok := m["to"]; ok {
			e.To = d.str(v, field(p, "to"))
		}
		if !validSegment(e.To) {
			d.failf(at(m["to"], item), field(p, "to"), "%q is not a file name (want letters, digits, '.', '_', '~' or '-')", e.To)
		} else if prev, ok := targets[e.To]; ok {
			d.failf(m["to"], field(p, "to"), "%q is already published by %s", e.To, prev)
		} else {
			targets[e.To] = p
		}
		out = append(out, e)
	}
	return out
}
