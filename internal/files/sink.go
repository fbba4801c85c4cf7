// Package files serves sets of plain files (the metal3 Ironic Python Agent kernel and initramfs, say) fetched
// from HTTP sites or OCI artifacts: downloaded with conditional requests, verified, optionally unpacked from a
// tarball, stored in the content store, published per set atomically, and served with http.ServeContent.
package files

import (
	"io"

	"imagecache.io/imagecache/internal/config"
)

// Rule publishes the source member matching From (a glob; see policy.MatchGlob) under the name To. For a
// tarball the members are its entries; for an OCI artifact they are its layers' titles.
type Rule = config.Extract

// Published is one file of a set version.
type Published struct {
	Name   string // the name it is served under: /files/<set>/<Name>
	Digest string // sha256:<hex> of its content
	Size   int64
}

// Sink receives the files of a source while it is read. Nothing a sink writes is visible until the caller
// publishes the whole set version, so a failure half-way leaves the previous version as it was.
type Sink interface {
	// Create starts the file that will be published as name; size is -1 when unknown.
	Create(name string, size int64) (FileWriter, error)
}

// FileWriter is one file being written to a Sink.
type FileWriter interface {
	io.Writer
	// Close finishes the file and returns its sha256 digest and size.
	Close() (digest string, size int64, err error)
	// Abort discards the file. It is safe after Close, failed or not: a file closed but never published
	// must not become visible.
	Abort()
}
