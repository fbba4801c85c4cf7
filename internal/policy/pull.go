// Package policy decides, for one request, whether imagecache may answer from
// its cache, must ask the upstream first, or must not contact it at all.
// It is pure: no I/O, no clock of its own, no knowledge of the config file.
package policy

import (
	"fmt"
	"time"
)

// Pull is a pull policy, spelled like Kubernetes' imagePullPolicy so that
// operators do not have to learn a second vocabulary.
type Pull string

const (
	Always       Pull = "Always"
	IfNotPresent Pull = "IfNotPresent"
	Never        Pull = "Never"
)

// ParsePull is case-sensitive, like imagePullPolicy: "always" in a config is
// more likely a typo worth reporting than an intent worth guessing.
func ParsePull(s string) (Pull, error) {
	switch p := Pull(s); p {
	case Always, IfNotPresent, Never:
		return p, nil
	}
	return "", fmt.Errorf("%q is not a pull policy (want Always, IfNotPresent or Never)", s)
}

// Rule is a fully resolved policy (defaults already merged in).
type Rule struct {
	// Glob patterns (see MatchGlob); "" means "any".
	Upstream, Repository, Tag string

	Pull Pull
	// RevalidateAfter lets Always trust an upstream check younger than this;
	// 0 means every request for a tag is checked.
	RevalidateAfter time.Duration
	// StaleIfError serves the last known good content when the check fails.
	StaleIfError bool
	// UpstreamTimeout bounds the wait for the upstream's first answer.
	UpstreamTimeout time.Duration
}

// Matches reports whether the rule applies to a request. Digest requests pass
// tag "", which only a Tag pattern of "", "*" or "**" matches.
func (r Rule) Matches(upstream, repository, tag string) bool {
	return MatchGlob(r.Upstream, upstream) &&
		MatchGlob(r.Repository, repository) &&
		MatchGlob(r.Tag, tag)
}

// Rules are ordered: the first matching rule wins, otherwise Default applies.
type Rules struct {
	List    []Rule
	Default Rule
}

// For returns the rule that governs one request.
func (r Rules) For(upstream, repository, tag string) Rule {
	for _, rule := range r.List {
		if rule.Matches(upstream, repository, tag) {
			return rule
		}
	}
	return r.Default
}
