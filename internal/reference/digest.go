package reference

import (
	"fmt"
	"strings"
)

// hexLength is the encoded length of each supported digest algorithm. Only
// these are accepted: the store verifies content while writing it, so a
// digest we cannot compute could never be served.
var hexLength = map[string]int{
	"sha256": 64,
	"sha512": 128,
}

const supportedAlgorithms = "sha256, sha512"

// ParseDigest checks that s is "sha256:<64 lowercase hex>" or
// "sha512:<128 lowercase hex>" and returns it. Uppercase hex is refused
// because a digest is also a cache key: two spellings of one digest would be
// two objects.
//
// It is hand-written (rather than go-digest) so the error says which part is
// wrong: a well-formed digest of another algorithm is told apart from a
// malformed one, and a wrong length names the expected length.
func ParseDigest(s string) (string, error) {
	alg, enc, ok := strings.Cut(s, ":")
	if !ok {
		return "", errorf(CodeDigestInvalid, "digest %s has no ':' between algorithm and hex, want e.g. sha256:<64 hex>", quote(s))
	}
	if msg := algorithmProblem(alg); msg != "" {
		return "", errorf(CodeDigestInvalid, "digest %s: %s", quote(s), msg)
	}
	if enc == "" {
		return "", errorf(CodeDigestInvalid, "digest %s has nothing after %q", quote(s), alg+":")
	}
	want, supported := hexLength[alg]
	if !supported {
		// Check the OCI encoded grammar [a-zA-Z0-9=_-]+ so that "unsupported"
		// is only said of something that is otherwise a digest.
		for i := 0; i < len(enc); i++ {
			if c := enc[i]; !isAlnum(c) && c != '=' && c != '_' && c != '-' {
				return "", errorf(CodeDigestInvalid, "digest %s contains %q after the algorithm", quote(s), c)
			}
		}
		return "", errorf(CodeDigestInvalid, "digest algorithm %s is not supported; supported: %s", quote(alg), supportedAlgorithms)
	}
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		switch {
		case c >= '0' && c <= '9' || c >= 'a' && c <= 'f':
		case c >= 'A' && c <= 'F':
			return "", errorf(CodeDigestInvalid, "digest %s has uppercase hex %q; the hex must be lowercase", quote(s), c)
		default:
			return "", errorf(CodeDigestInvalid, "digest %s contains %q; the part after %q must be lowercase hex", quote(s), c, alg+":")
		}
	}
	if len(enc) != want {
		return "", errorf(CodeDigestInvalid, "%s digest %s has %d hex characters, want %d", alg, quote(s), len(enc), want)
	}
	return s, nil
}

// algorithmProblem checks the OCI algorithm grammar
// [a-z0-9]+([+._-][a-z0-9]+)* and describes a violation, or returns "".
func algorithmProblem(alg string) string {
	if alg == "" {
		return "the algorithm before ':' is empty"
	}
	prevSep := true // a separator may not come first, nor follow another
	for i := 0; i < len(alg); i++ {
		c := alg[i]
		switch {
		case isLowerAlnum(c):
			prevSep = false
		case c == '+' || c == '.' || c == '_' || c == '-':
			if prevSep {
				return "algorithm " + quote(alg) + " is malformed"
			}
			prevSep = true
		case c >= 'A' && c <= 'Z':
			return "algorithm " + quote(alg) + " must be lowercase"
		default:
			return fmt.Sprintf("algorithm %s contains %q", quote(alg), c)
		}
	}
	if prevSep {
		return "algorithm " + quote(alg) + " is malformed"
	}
	return ""
}
