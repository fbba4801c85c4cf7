// Package reference parses the path of an OCI Distribution request and
// decides which configured upstream registry serves it.
//
// It is pure: no HTTP and no I/O, so the HTTP layer and the CLI can share it
// and it can be fuzzed cheaply.
package reference
