package reference

import "strings"

// MaxNameLength is the distribution-spec limit on a repository name. Clients
// apply it to host + "/" + name; we apply it to what we see, which is the
// most we can check.
const MaxNameLength = 255

// ValidateName checks a repository name against the OCI distribution-spec
// grammar
//
//	[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(\/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*
//
// with at most MaxNameLength characters. It is hand-written rather than a
// regexp so that the error says exactly what is wrong (uppercase, an empty
// component, "..", a bad separator) instead of "does not match".
func ValidateName(name string) error {
	if name == "" {
		return errorf(CodeNameInvalid, "repository name is empty")
	}
	if len(name) > MaxNameLength {
		return errorf(CodeNameInvalid, "repository name %s is %d characters long; the limit is %d",
			quote(name), len(name), MaxNameLength)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'A' && c <= 'Z':
			return errorf(CodeNameInvalid, "repository name %s contains uppercase %q; names must be lowercase",
				quote(name), c)
		case isLowerAlnum(c) || c == '.' || c == '_' || c == '-' || c == '/':
		default:
			return errorf(CodeNameInvalid, "repository name %s contains %q; only a-z, 0-9, '.', '_', '-' and '/' are allowed",
				quote(name), c)
		}
	}
	if name[0] == '/' {
		return errorf(CodeNameInvalid, "repository name %s starts with '/'", quote(name))
	}
	if name[len(name)-1] == '/' {
		return errorf(CodeNameInvalid, "repository name %s ends with '/'", quote(name))
	}
	for comp := range strings.SplitSeq(name, "/") {
		if msg := componentProblem(comp); msg != "" {
			return errorf(CodeNameInvalid, "repository name %s: %s", quote(name), msg)
		}
	}
	return nil
}

// componentProblem describes why one path component of a name (already known
// to hold only [a-z0-9._-]) breaks the grammar, or returns "".
func componentProblem(comp string) string {
	switch comp {
	case "":
		return "empty path component ('//')"
	case ".", "..":
		return "path component " + quote(comp) + " is not allowed"
	}
	if !isLowerAlnum(comp[0]) {
		return "path component " + quote(comp) + " must start with a lowercase letter or digit"
	}
	if !isLowerAlnum(comp[len(comp)-1]) {
		return "path component " + quote(comp) + " must end with a lowercase letter or digit"
	}
	// Alternate runs of alphanumerics and separators; each separator run
	// must be one of ".", "_", "__" or any number of "-".
	for i := 0; i < len(comp); {
		if isLowerAlnum(comp[i]) {
			i++
			continue
		}
		j := i
		for j < len(comp) && !isLowerAlnum(comp[j]) {
			j++
		}
		if sep := comp[i:j]; !validSeparator(sep) {
			return "path component " + quote(comp) + " has separator " + quote(sep) +
				"; between letters and digits only '.', '_', '__' or a run of '-' is allowed"
		}
		i = j
	}
	return ""
}

func validSeparator(sep string) bool {
	switch sep {
	case ".", "_", "__":
		return true
	}
	return strings.Trim(sep, "-") == ""
}

func isLowerAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
