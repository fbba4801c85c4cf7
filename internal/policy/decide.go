package policy

import (
	"fmt"
	"time"
)

// Action is what the cache must do to answer a request.
type Action int

// The zero Action is deliberately not a valid one, so a forgotten
// assignment shows up as "Action(0)" instead of silently serving.
const (
	// Serve answers from the cache with no upstream contact.
	Serve Action = iota + 1
	// Check revalidates a cached tag with one upstream HEAD.
	Check
	// Fetch downloads from the upstream with a GET.
	Fetch
	// Forbid refuses: the policy is Never and nothing is cached.
	Forbid
)

func (a Action) String() string {
	switch a {
	case Serve:
		return "Serve"
	case Check:
		return "Check"
	case Fetch:
		return "Fetch"
	case Forbid:
		return "Forbid"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// DecideTag decides for a request by tag. cached says whether the tag record
// and its manifest are in the cache; checkedAt is the last successful upstream
// check of that tag.
func DecideTag(rule Rule, cached bool, checkedAt, now time.Time) Action {
	if !cached {
		return fetchUnlessNever(rule)
	}
	if rule.Pull != Always {
		return Serve
	}
	// A zero RevalidateAfter means "check every time", even when the clock
	// says the last check happened this very instant.
	if rule.RevalidateAfter > 0 && now.Sub(checkedAt) < rule.RevalidateAfter {
		return Serve
	}
	return Check
}

// DecideDigest decides for a request by digest. Content behind a digest
// cannot change, so there is never a reason to check a cached one.
func DecideDigest(rule Rule, cached bool) Action {
	if cached {
		return Serve
	}
	return fetchUnlessNever(rule)
}

func fetchUnlessNever(rule Rule) Action {
	if rule.Pull == Never {
		return Forbid
	}
	return Fetch
}
