package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	yaml "sigs.k8s.io/yaml/goyaml.v3"
)

// decoder walks a yaml.Node tree by hand instead of unmarshalling into
// structs, so that every complaint carries the line of the offending node and
// all of them can be reported at once.
type decoder struct {
	source string
	errs   []error
}

func (d *decoder) fail(n *yaml.Node, path string, err error) {
	d.errs = append(d.errs, &Error{Source: d.source, Line: n.Line, Path: path, Err: err})
}

func (d *decoder) failf(n *yaml.Node, path, format string, args ...any) {
	d.fail(n, path, fmt.Errorf(format, args...))
}

func (d *decoder) err() error { return errors.Join(d.errs...) }

func field(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// resolve follows YAML aliases, so anchors work wherever a value does.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// isNull spots "key:" and "key: null", which count as if the key were absent:
// that is what someone who comments out the last child of a section expects.
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "nothing"
}

// mapping checks that n is a mapping whose keys are all in known and appear
// once, and returns the non-null value nodes by key. A null n gives an empty
// map.
func (d *decoder) mapping(n *yaml.Node, path string, known ...string) map[string]*yaml.Node {
	n = resolve(n)
	values := map[string]*yaml.Node{}
	if isNull(n) {
		return values
	}
	if n.Kind != yaml.MappingNode {
		d.failf(n, path, "want a mapping with keys %s, got %s", strings.Join(known, ", "), describe(n))
		return values
	}
	lines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		key := k.Value
		switch {
		case k.Kind != yaml.ScalarNode:
			d.failf(k, path, "a key must be a plain word, not %s", describe(k))
		case !contains(known, key):
			d.fail(k, field(path, key), unknownKey(key, known))
		case lines[key] > 0:
			d.failf(k, field(path, key), "duplicate key (first set on line %d)", lines[key])
		default:
			lines[key] = k.Line
			if !isNull(v) {
				values[key] = v
			}
		}
	}
	return values
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func unknownKey(key string, known []string) error {
	for _, k := range known {
		if strings.EqualFold(k, key) {
			return fmt.Errorf("unknown key (did you mean %s?)", k)
		}
	}
	return fmt.Errorf("unknown key (known keys: %s)", strings.Join(known, ", "))
}

// list returns the items of a sequence; null gives none.
func (d *decoder) list(n *yaml.Node, path string) []*yaml.Node {
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.failf(n, path, "want a list, got %s", describe(n))
		return nil
	}
	items := make([]*yaml.Node, len(n.Content))
	for i, item := range n.Content {
		items[i] = resolve(item)
	}
	return items
}

// str accepts any scalar and keeps its text as written, so that an unquoted
// `tag: 1.27` means the tag "1.27" and not the float 1.27. Null is "".
func (d *decoder) str(n *yaml.Node, path string) string {
	n = resolve(n)
	if isNull(n) {
		return ""
	}
	if n.Kind != yaml.ScalarNode || n.Tag == "!!bool" {
		d.failf(n, path, "want a string, got %s", describe(n))
		return ""
	}
	return n.Value
}

func (d *decoder) stringList(n *yaml.Node, path string) []string {
	var out []string
	for i, item := range d.list(n, path) {
		out = append(out, d.str(item, index(path, i)))
	}
	return out
}

func (d *decoder) boolean(n *yaml.Node, path string) bool {
	n = resolve(n)
	if isNull(n) {
		return false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		d.failf(n, path, "want true or false, got %s", describe(n))
		return false
	}
	return n.Value == "true" || n.Value == "True" || n.Value == "TRUE"
}

// duration reads a Go duration; ok is false when an error was reported, so
// callers do not pile a range complaint on top of a syntax one.
func (d *decoder) duration(n *yaml.Node, path string) (v time.Duration, ok bool) {
	s := d.str(n, path)
	v, err := time.ParseDuration(s)
	if err != nil {
		d.failf(n, path, "%q is not a duration (write e.g. 30s, 5m or 1h)", s)
		return 0, false
	}
	return v, true
}

// size reads a Kubernetes quantity ("20Gi", "500M", "0") as a byte count.
func (d *decoder) size(n *yaml.Node, path string) int64 {
	s := d.str(n, path)
	q, err := resource.ParseQuantity(s)
	if err != nil {
		// resource's own message is a regular expression; an example helps more.
		d.failf(n, path, "%q is not a quantity (write e.g. 20Gi, 500Mi or 0)", s)
		return 0
	}
	if q.Sign() < 0 {
		d.failf(n, path, "%q is negative; use 0 for unbounded", s)
		return 0
	}
	// ParseQuantity clamps what does not fit in an int64 to MaxInt64, so
	// that value is the only sign of an overflow.
	if q.Value() == math.MaxInt64 {
		d.failf(n, path, "%q is too large to count in bytes", s)
		return 0
	}
	return q.Value()
}

// address reads a host:port to listen on. The host may be empty (":5000"
// listens everywhere), the port may not.
func (d *decoder) address(n *yaml.Node, path string) string {
	s := d.str(n, path)
	if s == "" {
		return ""
	}
	if _, port, err := net.SplitHostPort(s); err != nil || port == "" {
		d.failf(n, path, "%q is not a host:port to listen on (write e.g. 127.0.0.1:5000 or :5000)", s)
	}
	return s
}
