package ui

import (
	"fmt"
	"html/template"
	"net/url"
	"strconv"
	"strings"
	"time"

	"imagecache.io/imagecache/internal/files"
	"imagecache.io/imagecache/internal/stats"
)

// view is what the template renders.
type view struct {
	Now            time.Time
	Version        string
	Since          time.Time
	Alerts         []alert
	Storage        storage
	LastHour       stats.Counts
	Requests       chart
	Bytes          chart
	Upstreams      []upstream
	Largest        []image
	MostUsed       []image
	ImageCount     int
	InventoryError string
	Sets           []files.Status
	Recent         []stats.Event
}

// alert is one line of the banner at the top: what needs a person, in one sentence.
type alert struct {
	Level string // bad or warn
	Text  string
}

type storage struct {
	Used, Objects, Limit, Pinned int64
	Low                          float64 // eviction's low watermark, a fraction of Limit
	Known                        bool    // Pinned could be read
}

// UsedPct and PinnedPct are bar widths: shares of the limit, or of what is used when there is no limit.
func (s storage) UsedPct() float64 {
	if s.Limit <= 0 {
		return 100
	}
	return clampPct(float64(s.Used) / float64(s.Limit) * 100)
}

func (s storage) PinnedPct() float64 {
	base := s.Limit
	if base <= 0 {
		base = s.Used
	}
	if base <= 0 {
		return 0
	}
	return clampPct(float64(s.Pinned) / float64(base) * 100)
}

// LowPct places the low-watermark tick on the bar.
func (s storage) LowPct() float64 { return clampPct(s.Low * 100) }

// Level colours the bar: eviction starts at the limit, so close to it is worth a look.
func (s storage) Level() string {
	switch {
	case s.Limit <= 0:
		return "ok"
	case s.Used > s.Limit || (s.Known && s.Pinned > s.Limit):
		return "bad"
	case float64(s.Used) >= 0.9*float64(s.Limit):
		return "warn"
	}
	return "ok"
}

func clampPct(p float64) float64 { return max(0, min(100, p)) }

type upstream struct {
	stats.Upstream
	URL       string
	Contacted bool
}

// State is healthy, failing, or unknown (no request yet).
func (u upstream) State() string {
	switch {
	case !u.Contacted || u.Requests == 0:
		return "unknown"
	case u.Healthy():
		return "healthy"
	}
	return "failing"
}

// alerts sums up what needs attention, worst first.
func (v *view) alerts() []alert {
	var bad, warn []alert
	for _, u := range v.Upstreams {
		if u.State() == "failing" {
			bad = append(bad, alert{"bad", fmt.Sprintf("upstream %s is failing (last error %s): %s", u.Name, v.Ago(u.LastError), u.LastMessage)})
		}
	}
	s := v.Storage
	switch {
	case s.Limit > 0 && s.Known && s.Pinned > s.Limit:
		bad = append(bad, alert{"bad", fmt.Sprintf("pinned content (%s) exceeds storage.maxSize (%s): raise maxSize or pin less", Bytes(s.Pinned), Bytes(s.Limit))})
	case s.Level() == "bad":
		warn = append(warn, alert{"warn", fmt.Sprintf("storage is over its limit (%s of %s): eviction is running", Bytes(s.Used), Bytes(s.Limit))})
	}
	for _, set := range v.Sets {
		switch set.State {
		case files.Failed:
			bad = append(bad, alert{"bad", fmt.Sprintf("file set %s has never downloaded: %s", set.Set, set.Message)})
		case files.Stale:
			warn = append(warn, alert{"warn", fmt.Sprintf("file set %s is stale (serving version %d): %s", set.Set, set.Version, set.Message)})
		}
	}
	if v.LastHour.Stale > 0 {
		warn = append(warn, alert{"warn", plural(v.LastHour.Stale, "stale answer") + " in the last hour"})
	}
	if v.LastHour.Errors > 0 {
		warn = append(warn, alert{"warn", plural(v.LastHour.Errors, "error") + " in the last hour"})
	}
	if v.InventoryError != "" {
		warn = append(warn, alert{"warn", "could not list the store: " + v.InventoryError})
	}
	return append(bad, warn...)
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return Num(n) + " " + what + "s"
}

// HitRatio is over the last hour, as a percentage with one decimal.
func (v *view) HitRatio() string {
	c := v.LastHour
	if c.Hits+c.Revalidated+c.Stale+c.Misses == 0 {
		return "–"
	}
	return strconv.FormatFloat(c.HitRatio()*100, 'f', 1, 64) + "%"
}

// Answered is every answer of the last hour.
func (v *view) Answered() int64 {
	c := v.LastHour
	return c.Hits + c.Revalidated + c.Stale + c.Misses + c.Errors
}

// CachePct is the share of bytes served from the cache in the last hour.
func (v *view) CachePct() string {
	c := v.LastHour
	total := c.BytesFromCache + c.BytesFromUpstream
	if total == 0 {
		return "–"
	}
	return strconv.FormatFloat(float64(c.BytesFromCache)/float64(total)*100, 'f', 1, 64) + "%"
}

// Ago says how long before the page was made t was, the way a person says it.
func (v *view) Ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := v.Now.Sub(t)
	switch {
	case d < -time.Second:
		return "in " + roughly(-d)
	case d < 5*time.Second:
		return "just now"
	}
	return roughly(d) + " ago"
}

func roughly(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// Clock is t in UTC: the time of day when it is today, the date too otherwise.
func (v *view) Clock(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	t = t.UTC()
	if y, m, d := t.Date(); y == v.Now.Year() && m == v.Now.Month() && d == v.Now.Day() {
		return t.Format("15:04:05") + " UTC"
	}
	return t.Format("2006-01-02 15:04") + " UTC"
}

// Uptime is how long the stats have been counting (the process's life).
func (v *view) Uptime() string { return roughly(v.Now.Sub(v.Since)) }

var funcs = template.FuncMap{
	"bytes":  Bytes,
	"num":    Num,
	"short":  shortDigest,
	"pct":    func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	"lower":  strings.ToLower,
	"public": publicURL,
	"plus":   func(a, b float64) float64 { return a + b },
	"half":   func(a float64) float64 { return a / 2 },
	"pair":   func(v *view, images []image) imageList { return imageList{v, images} },
	"deref": func(t *time.Time) time.Time {
		if t == nil {
			return time.Time{}
		}
		return *t
	},
}

// Bytes is n in binary units with three significant digits ("1.46 GiB").
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), -1
	for f >= unit && i < 5 {
		f /= unit
		i++
	}
	prec := 2
	switch {
	case f >= 100:
		prec = 0
	case f >= 10:
		prec = 1
	}
	return strconv.FormatFloat(f, 'f', prec, 64) + " " + string("KMGTPE"[i]) + "iB"
}

// Num groups digits by thousands ("1,234,567"): exact figures people can still read.
func Num(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// shortDigest keeps "sha256:" and 12 hex digits: enough to tell images apart on screen.
func shortDigest(d string) string {
	if algo, hex, ok := strings.Cut(d, ":"); ok && len(hex) > 12 {
		return algo + ":" + hex[:12]
	}
	return d
}

// publicURL drops any user:password an upstream URL might carry: the page is served without a token.
func publicURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	u.User = nil
	return u.String()
}

// imageList hands the images template its rows and the page (for times relative to the page's).
type imageList struct {
	V      *view
	Images []image
}
