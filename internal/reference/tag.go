package reference

import "strings"

// MaxTagLength is the distribution-spec limit on a tag.
const MaxTagLength = 128

// ValidateTag checks a tag against [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}.
func ValidateTag(tag string) error {
	if tag == "" {
		return errorf(CodeTagInvalid, "tag is empty")
	}
	if len(tag) > MaxTagLength {
		return errorf(CodeTagInvalid, "tag %s is %d characters long; the limit is %d", quote(tag), len(tag), MaxTagLength)
	}
	if c := tag[0]; c == '.' || c == '-' {
		return errorf(CodeTagInvalid, "tag %s starts with %q; a tag must start with a letter, digit or '_'", quote(tag), c)
	}
	for i := 0; i < len(tag); i++ {
		c := tag[i]
		if !isAlnum(c) && c != '_' && c != '.' && c != '-' {
			return errorf(CodeTagInvalid, "tag %s contains %q; only letters, digits, '_', '.' and '-' are allowed", quote(tag), c)
		}
	}
	return nil
}

// IsDigest reports whether ref is meant as a digest rather than a tag. A tag
// can never contain ':', so this decides which validator applies and hence
// which error a client sees.
func IsDigest(ref string) bool { return strings.IndexByte(ref, ':') >= 0 }

func isAlnum(c byte) bool { return isLowerAlnum(c) || c >= 'A' && c <= 'Z' }

// Join writes a name with its tag or digest the way references are written: name:tag, name@digest.
func Join(name, ref string) string {
	if IsDigest(ref) {
		return name + "@" + ref
	}
	return name + ":" + ref
}
