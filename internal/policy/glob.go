package policy

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

var errBadClass = errors.New("bad character class")

// ValidateGlob reports a malformed pattern, so that configs fail at load time
// rather than by silently never matching.
func ValidateGlob(pattern string) error {
	for i := 0; i < len(pattern); {
		switch pattern[i] {
		case '[':
			_, next, err := matchClass(pattern, i, 0)
			if err != nil {
				return fmt.Errorf("glob %q: %w at offset %d", pattern, err, i)
			}
			i = next
		case '\\':
			if i+1 == len(pattern) {
				return fmt.Errorf("glob %q: trailing backslash escapes nothing", pattern)
			}
			i += 2
		default:
			i++
		}
	}
	return nil
}

// MatchGlob reports whether s matches pattern. The syntax follows the "/"
// structure of repository names:
//
//	pattern  matches
//	*        any run of characters except '/'
//	**       any run of characters including '/'; as a whole path segment
//	         ("**/x", "a/**/b") also zero segments, so "a/**/b" matches "a/b"
//	?        one character except '/'
//	[...]    a class as in path.Match ("[a-z]", "[^0-9]"), never '/'
//	\c       the character c literally
//
// The empty pattern means "any" and matches everything, including "".
// A malformed pattern matches nothing; ValidateGlob tells why.
func MatchGlob(pattern, s string) bool {
	if pattern == "" {
		return true
	}
	return matchFrom(pattern, 0, s)
}

// matchFrom matches s against pattern[pi:]. It backtracks over stars; the
// patterns come from an operator's config and the names are short, so the
// worst case does not matter in practice.
func matchFrom(pattern string, pi int, s string) bool {
	for pi < len(pattern) {
		switch pattern[pi] {
		case '*':
			return matchStar(pattern, pi, s)
		case '?':
			r, n := utf8.DecodeRuneInString(s)
			if n == 0 || r == '/' {
				return false
			}
			s, pi = s[n:], pi+1
		case '[':
			r, n := utf8.DecodeRuneInString(s)
			if n == 0 || r == '/' {
				return false
			}
			ok, next, err := matchClass(pattern, pi, r)
			if err != nil || !ok {
				return false
			}
			s, pi = s[n:], next
		case '\\':
			if pi+1 == len(pattern) || len(s) == 0 || s[0] != pattern[pi+1] {
				return false
			}
			// Escaped bytes compare one byte at a time, which also works
			// for multi-byte runes because their bytes are never special.
			s, pi = s[1:], pi+2
		default:
			if len(s) == 0 || s[0] != pattern[pi] {
				return false
			}
			s, pi = s[1:], pi+1
		}
	}
	return len(s) == 0
}

// matchStar handles '*' and '**' at pattern[pi].
func matchStar(pattern string, pi int, s string) bool {
	end := pi
	for end < len(pattern) && pattern[end] == '*' {
		end++
	}
	if end-pi == 1 {
		for i := 0; i <= len(s); i++ {
			if matchFrom(pattern, end, s[i:]) {
				return true
			}
			if i < len(s) && s[i] == '/' {
				return false
			}
		}
		return false
	}
	wholeSegment := (pi == 0 || pattern[pi-1] == '/') &&
		end < len(pattern) && pattern[end] == '/'
	if wholeSegment && matchFrom(pattern, end+1, s) {
		return true
	}
	for i := 0; i <= len(s); i++ {
		if matchFrom(pattern, end, s[i:]) {
			return true
		}
	}
	return false
}

// matchClass parses the class starting at pattern[i] == '[' and reports
// whether r is in it, and the index just past the closing ']'.
func matchClass(pattern string, i int, r rune) (bool, int, error) {
	i++
	negated := i < len(pattern) && pattern[i] == '^'
	if negated {
		i++
	}
	matched := false
	for n := 0; ; n++ {
		if n > 0 && i < len(pattern) && pattern[i] == ']' {
			return matched != negated, i + 1, nil
		}
		lo, next, err := classChar(pattern, i)
		if err != nil {
			return false, 0, err
		}
		hi := lo
		if next < len(pattern) && pattern[next] == '-' {
			if hi, next, err = classChar(pattern, next+1); err != nil {
				return false, 0, err
			}
		}
		if lo <= r && r <= hi {
			matched = true
		}
		i = next
	}
}

// classChar reads one possibly escaped character of a class, rejecting what
// path.Match rejects: an unterminated class, and an unescaped '-' or ']' where
// a character is expected.
func classChar(pattern string, i int) (rune, int, error) {
	if i >= len(pattern) || pattern[i] == '-' || pattern[i] == ']' {
		return 0, 0, errBadClass
	}
	if pattern[i] == '\\' {
		i++
		if i >= len(pattern) {
			return 0, 0, errBadClass
		}
	}
	r, n := utf8.DecodeRuneInString(pattern[i:])
	if r == utf8.RuneError && n <= 1 {
		return 0, 0, errBadClass
	}
	return r, i + n, nil
}
