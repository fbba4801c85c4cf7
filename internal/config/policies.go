package config

import (
	yaml "sigs.k8s.io/yaml/goyaml.v3"

	"imagecache.io/imagecache/internal/policy"
)

// rule reads one policy over base: a key the file sets overrides base, a key
// it leaves out keeps base's value. withMatch says whether the match key is
// allowed (it is not in defaultPolicy, which matches everything).
func (d *decoder) rule(n *yaml.Node, path string, base policy.Rule, withMatch bool) policy.Rule {
	keys := []string{"pull", "revalidateAfter", "staleIfError", "upstreamTimeout"}
	if withMatch {
		keys = append([]string{"match"}, keys...)
	}
	r := base
	m := d.mapping(n, path, keys...)
	if v, ok := m["match"]; ok {
		d.match(v, field(path, "match"), &r)
	}
	if v, ok := m["pull"]; ok {
		p := field(path, "pull")
		pull, err := policy.ParsePull(d.str(v, p))
		if err != nil {
			d.fail(v, p, err)
		}
		r.Pull = pull
	}
	if v, ok := m["revalidateAfter"]; ok {
		p := field(path, "revalidateAfter")
		if dur, ok := d.duration(v, p); ok && dur < 0 {
			d.failf(v, p, "must not be negative; 0 checks every time")
		} else {
			r.RevalidateAfter = dur
		}
	}
	if v, ok := m["staleIfError"]; ok {
		r.StaleIfError = d.boolean(v, field(path, "staleIfError"))
	}
	if v, ok := m["upstreamTimeout"]; ok {
		p := field(path, "upstreamTimeout")
		// Zero would mean either "no wait" or "wait forever"; both are
		// wrong for a cache whose point is to answer fast.
		if dur, ok := d.duration(v, p); ok && dur <= 0 {
			d.failf(v, p, "must be greater than 0")
		} else {
			r.UpstreamTimeout = dur
		}
	}
	return r
}

func (d *decoder) match(n *yaml.Node, path string, r *policy.Rule) {
	m := d.mapping(n, path, "upstream", "repository", "tag")
	glob := func(key string) string {
		v, ok := m[key]
		if !ok {
			return ""
		}
		p := field(path, key)
		s := d.str(v, p)
		if err := policy.ValidateGlob(s); err != nil {
			d.fail(v, p, err)
		}
		return s
	}
	r.Upstream, r.Repository, r.Tag = glob("upstream"), glob("repository"), glob("tag")
}
