// Package config loads imagecache's YAML config file (DESIGN.md §3), fills in
// defaults and refuses anything it does not understand, naming the key and
// the line, so that a typo stops `serve` instead of silently changing what
// gets cached.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	yaml "sigs.k8s.io/yaml/goyaml.v3"

	"imagecache.io/imagecache/internal/policy"
)

// Config is the whole config file with defaults applied.
type Config struct {
	Listen  string
	Storage Storage
	// Upstreams are the registries mirrored. Without an upstreams key they
	// are DefaultUpstreams(); an explicit empty list means none.
	Upstreams []Upstream
	// Policies are resolved: fields missing in the file come from
	// DefaultPolicy.
	Policies      []policy.Rule
	DefaultPolicy policy.Rule
	// Files are parsed and validated but not yet served by the program.
	Files []FileSet
	// Proxy is nil when the proxy is off (no proxy section or no listen).
	Proxy *Proxy
	// Pins are references whose content is never evicted.
	Pins []string
	// Admin protects the admin API.
	Admin Admin
}

// Storage says where content lives and how much of it to keep.
type Storage struct {
	Path string
	// MaxSize and MaxObjectSize are bytes; 0 means unbounded.
	MaxSize       int64
	MaxObjectSize int64
	// LowWatermark is the fraction of MaxSize eviction brings the store down to once MaxSize is passed.
	LowWatermark float64
}

const (
	defaultListen      = "127.0.0.1:5000"
	defaultStoragePath = "./imagecache-data"
)

// builtinPolicy is what a rule gets for fields that neither it nor
// defaultPolicy sets: check tags every time, but keep serving when the
// upstream is down, and give up on a silent upstream quickly.
func builtinPolicy() policy.Rule {
	return policy.Rule{
		Pull:            policy.Always,
		StaleIfError:    true,
		UpstreamTimeout: 5 * time.Second,
	}
}

// Default is the config `serve` uses with no config file.
func Default() *Config {
	return &Config{
		Listen:        defaultListen,
		Storage:       Storage{Path: defaultStoragePath, LowWatermark: 0.9},
		Upstreams:     DefaultUpstreams(),
		DefaultPolicy: builtinPolicy(),
	}
}

// Rules returns the policies in the form the cache looks them up.
//
// A rule's upstream may be written as an alias or URL host; it is matched as the upstream's name, which is
// what requests carry. On Docker Hub a one-component repository pattern ("busybox", "nginx*") means the
// official image, library/<name>, as references do.
func (c *Config) Rules() policy.Rules {
	list := slices.Clone(c.Policies)
	for i, r := range list {
		u, ok := c.upstreamNamed(r.Upstream)
		if !ok {
			continue
		}
		list[i].Upstream = u.Name
		if u.IsDockerHub() && r.Repository != "" && r.Repository != "**" && !strings.Contains(r.Repository, "/") {
			list[i].Repository = "library/" + r.Repository
		}
	}
	return policy.Rules{List: list, Default: c.DefaultPolicy}
}

// Load reads and parses the config file at path; errors start with path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config file: %w", err)
	}
	return Parse(data, path)
}

// Parse parses a config file's contents. source names it in errors. An empty
// document gives Default().
func Parse(data []byte, source string) (*Config, error) {
	root, err := parseDocument(data, source)
	if err != nil {
		return nil, err
	}
	cfg := Default()
	if root == nil {
		return cfg, nil
	}
	d := &decoder{source: source}
	d.config(root, cfg)
	if err := d.err(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// parseDocument returns the root node of the only YAML document in data, or
// nil when there is none.
func parseDocument(data []byte, source string) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("%s: parse YAML: %w", source, err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, fmt.Errorf("%s: parse YAML: %w", source, err)
	default:
		// Silently ignoring a second document would ignore half a config.
		return nil, &Error{Source: source, Line: extra.Line,
			Err: errors.New("more than one YAML document; put the whole config in one")}
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	root := resolve(doc.Content[0])
	if isNull(root) {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{Source: source, Line: root.Line,
			Err: fmt.Errorf("the config must be a mapping of keys such as listen and upstreams, not %s", describe(root))}
	}
	return root, nil
}

// config fills cfg from the top-level mapping. defaultPolicy is read before
// policies because every rule inherits from it, wherever it is in the file.
func (d *decoder) config(root *yaml.Node, cfg *Config) {
	m := d.mapping(root, "", "listen", "storage", "upstreams", "policies", "defaultPolicy", "files", "proxy", "pins", "admin")
	if n, ok := m["listen"]; ok {
		if s := d.address(n, "listen"); s != "" {
			cfg.Listen = s
		}
	}
	if n, ok := m["storage"]; ok {
		d.storage(n, "storage", &cfg.Storage)
	}
	if n, ok := m["upstreams"]; ok {
		cfg.Upstreams = d.upstreams(n, "upstreams")
	}
	if n, ok := m["defaultPolicy"]; ok {
		cfg.DefaultPolicy = d.rule(n, "defaultPolicy", cfg.DefaultPolicy, false)
	}
	if n, ok := m["policies"]; ok {
		for i, item := range d.list(n, "policies") {
			cfg.Policies = append(cfg.Policies, d.rule(item, index("policies", i), cfg.DefaultPolicy, true))
		}
	}
	if n, ok := m["files"]; ok {
		cfg.Files = d.fileSets(n, "files")
	}
	if n, ok := m["proxy"]; ok {
		cfg.Proxy = d.proxy(n, "proxy")
	}
	if n, ok := m["pins"]; ok {
		cfg.Pins = d.pins(n, "pins")
	}
	if n, ok := m["admin"]; ok {
		cfg.Admin = d.admin(n, "admin")
	}
}

// pins reads references that must never be evicted: <upstream>/<repository>:<tag> or @<digest>.
func (d *decoder) pins(n *yaml.Node, path string) []string {
	var out []string
	for i, item := range d.list(n, path) {
		p := index(path, i)
		ref := d.str(item, p)
		up, rest, ok := strings.Cut(ref, "/")
		if !ok || up == "" || !(strings.Contains(rest, ":") || strings.Contains(rest, "@")) {
			d.failf(item, p, "%q is not a pinned reference (want <upstream>/<repository>:<tag> or <upstream>/<repository>@<digest>, e.g. docker.io/library/nginx:1.27)", ref)
			continue
		}
		out = append(out, ref)
	}
	return out
}

func (d *decoder) storage(n *yaml.Node, path string, s *Storage) {
	m := d.mapping(n, path, "path", "maxSize", "maxObjectSize", "lowWatermark")
	if v, ok := m["path"]; ok {
		if p := d.str(v, field(path, "path")); p != "" {
			s.Path = p
		}
	}
	if v, ok := m["maxSize"]; ok {
		s.MaxSize = d.size(v, field(path, "maxSize"))
	}
	if v, ok := m["maxObjectSize"]; ok {
		s.MaxObjectSize = d.size(v, field(path, "maxObjectSize"))
	}
	if v, ok := m["lowWatermark"]; ok {
		p := field(path, "lowWatermark")
		raw := d.str(v, p)
		pct, err := strconv.ParseFloat(strings.TrimSuffix(raw, "%"), 64)
		if err != nil || pct <= 0 || pct >= 100 {
			d.failf(v, p, "%q is not a percentage between 0 and 100 (write e.g. 90%%)", raw)
		} else {
			s.LowWatermark = pct / 100
		}
	}
}
