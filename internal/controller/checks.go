package controller

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"imagecache.io/imagecache/api/v1alpha1"
)

// imageChecks remembers this replica's last complete check of each ImageCache's images. Many reconciles are
// not due for one: a file set finished a refresh, this replica won the election, the manager was restarted
// after an API outage, a status write raced an edit. They report the remembered check instead of asking
// every upstream again, so each image costs its upstream one check per refreshInterval.
type imageChecks struct {
	mu   sync.Mutex
	last map[types.NamespacedName]imageCheck
}

type imageCheck struct {
	inputs string // what the check depended on; any change makes it obsolete
	at     time.Time
	images []v1alpha1.ImageStatus
	pins   []string
}

// checkSlack lets a reconcile that comes just before a check is due make it, rather than reporting a check
// that expires a moment later.
const checkSlack = time.Second

func newImageChecks() *imageChecks {
	return &imageChecks{last: map[types.NamespacedName]imageCheck{}}
}

// checkInputs is what an ImageCache's image check depends on: its spec (by generation), its annotations
// (kubectl annotate asks for a check now) and the versions of the pull secrets that were read.
func checkInputs(ic *v1alpha1.ImageCache, secretIDs []string) string {
	return fmt.Sprintf("%d|%v|%v", ic.Generation, ic.Annotations, secretIDs)
}

// recent returns the last check when it was made with the same inputs less than refresh ago.
func (c *imageChecks) recent(key types.NamespacedName, inputs string, refresh time.Duration, now time.Time) (imageCheck, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	last, ok := c.last[key]
	if !ok || last.inputs != inputs || !now.Before(last.at.Add(refresh-checkSlack)) {
		return imageCheck{}, false
	}
	return last, true
}

func (c *imageChecks) remember(key types.NamespacedName, check imageCheck) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last[key] = check
}

func (c *imageChecks) forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.last, key)
}
