package files

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/klauspost/compress/zstd"

	"imagecache.io/imagecache/internal/policy"
)

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// maxListedMembers bounds the member names quoted when a rule matches nothing: enough to show the user what
// the archive looks like without pasting a whole listing into a log line.
const maxListedMembers = 10

// Extract reads a tar archive from r — gzip-compressed, zstd-compressed or plain, detected from the first
// bytes (gzip 1f 8b, zstd 28 b5 2f fd, else tar), never from a file name — and writes each member matched by
// a rule to sink under the rule's To name. It reads r to its end (so the caller's hash of the whole download
// is complete) even after the last needed member.
//
// A rule's From is matched against the member's cleaned path (without a leading "./") when it contains "/",
// otherwise against the member's base name; each rule must match exactly one member, which must be a regular
// file. A member with an absolute path or a ".." component fails the whole archive. The result is in rule
// order. On error every FileWriter created so far is Aborted, including those already Closed, and r may not
// have been read to its end.
func Extract(r io.Reader, rules []Rule, sink Sink) ([]Published, error) {
	if len(rules) == 0 {
		return nil, errors.New("files.Extract called with no extract rules: a set without rules publishes the download itself and must not be extracted")
	}
	x := &extraction{rules: rules, sink: sink, claims: make([]claim, len(rules))}
	pubs, err := x.run(r)
	if err != nil {
		x.abortAll()
		return nil, err
	}
	return pubs, nil
}

// extraction is the state of one Extract call.
type extraction struct {
	rules    []Rule
	sink     Sink
	claims   []claim      // per rule, the member it matched
	writers  []FileWriter // every writer created, so that a failure can Abort them all
	seen     []string     // the first members, quoted when a rule matches nothing
	nmembers int          // how many members the archive has
	last     string       // the last member seen, to locate a read error
}

// claim is the member a rule matched and what publishing it produced.
type claim struct {
	member    string
	published Published
}

func (x *extraction) run(r io.Reader) ([]Published, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	data, closeData, err := decompressor(br)
	if err != nil {
		return nil, err
	}
	defer closeData()
	if err := x.members(tar.NewReader(data)); err != nil {
		return nil, err
	}
	if err := drain(data, br); err != nil {
		return nil, err
	}
	return x.published()
}

// decompressor returns the tar stream inside br, detecting the compression from its magic number because URLs
// and Content-Types are unreliable (a .tar.gz served as application/octet-stream, a .tgz renamed .tar).
func decompressor(br *bufio.Reader) (io.Reader, func(), error) {
	magic, err := br.Peek(len(zstdMagic))
	if err != nil && err != io.EOF {
		return nil, nil, fmt.Errorf("reading the start of the archive: %w", err)
	}
	switch {
	case bytes.HasPrefix(magic, gzipMagic):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("the download starts like gzip but its gzip header is invalid: %w; the file is corrupt or not a .tar.gz", err)
		}
		return zr, func() { zr.Close() }, nil
	case bytes.HasPrefix(magic, zstdMagic):
		// One decoder goroutine is plenty for a download-bound stream and leaves nothing running after Close.
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, nil, fmt.Errorf("starting zstd decompression of the archive: %w", err)
		}
		return zr, zr.Close, nil
	default:
		return br, func() {}, nil
	}
}

// members walks the archive to its end-of-archive marker, publishing the members the rules match.
func (x *extraction) members(tr *tar.Reader) error {
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		// With GODEBUG=tarinsecurepath=0 Next reports unsafe names itself; checkMemberPath gives the reason.
		if err != nil && !errors.Is(err, tar.ErrInsecurePath) {
			return fmt.Errorf("reading the tar archive %s: %w; the download is corrupt or truncated", x.position(), err)
		}
		if err := x.member(hdr, tr); err != nil {
			return err
		}
	}
}

func (x *extraction) member(hdr *tar.Header, body io.Reader) error {
	if err := checkMemberPath(hdr.Name); err != nil {
		return err
	}
	name := memberPath(hdr.Name)
	if name == "." {
		// The archive's root directory ("./"), which many tarballs carry; it is nobody's file.
		return nil
	}
	x.see(name)
	matched, err := x.match(name, hdr)
	if err != nil || len(matched) == 0 {
		return err
	}
	return x.publish(name, hdr, body, matched)
}

// position says where in the archive a read error happened.
func (x *extraction) position() string {
	if x.last == "" {
		return "before its first member"
	}
	return fmt.Sprintf("after member %q", x.last)
}

// checkMemberPath refuses names that would escape a directory they were unpacked into. We unpack nothing, but
// such a member means the archive is hostile or broken, and neither should be served.
func checkMemberPath(name string) error {
	if strings.HasPrefix(name, "/") {
		return fmt.Errorf("archive member %q has an absolute path; refusing the whole archive as hostile or broken", name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return fmt.Errorf("archive member %q has a \"..\" path component; refusing the whole archive as hostile or broken", name)
		}
	}
	return nil
}

// memberPath is the name rules match against: cleaned, so that "./a", "a" and "a/" are the same member.
func memberPath(name string) string {
	return path.Clean(name)
}

func (x *extraction) see(name string) {
	x.nmembers++
	x.last = name
	if len(x.seen) < maxListedMembers {
		x.seen = append(x.seen, name)
	}
}

// match returns the indices of the rules matching the member, refusing a second match of a rule and a match of
// anything but a regular file.
func (x *extraction) match(name string, hdr *tar.Header) ([]int, error) {
	var matched []int
	for i, rule := range x.rules {
		if !ruleMatches(rule.From, name) {
			continue
		}
		if prev := x.claims[i].member; prev != "" {
			return nil, fmt.Errorf("extract rule from=%q matches both archive members %q and %q; make the glob specific enough to match exactly one", rule.From, prev, name)
		}
		if err := checkRegular(hdr, name, rule); err != nil {
			return nil, err
		}
		x.claims[i].member = name
		matched = append(matched, i)
	}
	return matched, nil
}

// ruleMatches matches a From with a "/" against the whole path, so that a rule can pick one of several
// same-named members, and any other From against the base name, so that the usual rule does not depend on
// whether the tarball was made with a "./" or directory prefix.
func ruleMatches(from, name string) bool {
	if strings.Contains(from, "/") {
		// Member paths have no "./" prefix after cleaning, so a From written with one would never match.
		for strings.HasPrefix(from, "./") {
			from = from[2:]
		}
		return policy.MatchGlob(from, name)
	}
	return policy.MatchGlob(from, path.Base(name))
}

// checkRegular refuses to publish links and special files: a link's content lives in another member (or
// outside the archive), and a directory or device has none.
func checkRegular(hdr *tar.Header, name string, rule Rule) error {
	var what string
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeGNUSparse: // a sparse file reads back as its full content
		return nil
	case tar.TypeSymlink:
		what = fmt.Sprintf("is a symlink to %q", hdr.Linkname)
	case tar.TypeLink:
		what = fmt.Sprintf("is a hard link to %q", hdr.Linkname)
	case tar.TypeDir:
		what = "is a directory"
	case tar.TypeChar, tar.TypeBlock:
		what = "is a device"
	case tar.TypeFifo:
		what = "is a named pipe"
	default:
		what = fmt.Sprintf("has tar type %q", hdr.Typeflag)
	}
	msg := fmt.Sprintf("archive member %q matched by extract rule from=%q %s; only regular files can be published", name, rule.From, what)
	if hdr.Typeflag == tar.TypeSymlink || hdr.Typeflag == tar.TypeLink {
		msg += "; point the rule at the link's target instead"
	}
	return errors.New(msg)
}

// publish writes one member to a new file for each rule matching it (one member may be published under
// several names), checking that the sink received exactly the size the tar header announced.
func (x *extraction) publish(name string, hdr *tar.Header, body io.Reader, matched []int) error {
	fws := make([]FileWriter, 0, len(matched))
	ws := make([]io.Writer, 0, len(matched))
	for _, i := range matched {
		fw, err := x.sink.Create(x.rules[i].To, hdr.Size)
		if err != nil {
			return fmt.Errorf("creating file %q for archive member %q: %w", x.rules[i].To, name, err)
		}
		x.writers = append(x.writers, fw)
		fws = append(fws, fw)
		ws = append(ws, fw)
	}
	if err := copyMember(io.MultiWriter(ws...), body, name); err != nil {
		return err
	}
	for k, i := range matched {
		p, err := closeFile(fws[k], x.rules[i].To, name, hdr.Size)
		if err != nil {
			return err
		}
		x.claims[i].published = p
	}
	return nil
}

// copyMember tells read errors (a corrupt or truncated download) from write errors (a full disk), since they
// call for different fixes.
func copyMember(dst io.Writer, body io.Reader, name string) error {
	w := &errRecorder{w: dst}
	_, err := io.CopyBuffer(w, body, make([]byte, 256<<10))
	switch {
	case err == nil:
		return nil
	case w.err != nil:
		return fmt.Errorf("writing archive member %q to the store: %w", name, err)
	default:
		return fmt.Errorf("reading archive member %q: %w; the download is corrupt or truncated", name, err)
	}
}

// errRecorder remembers the error its writer returned.
type errRecorder struct {
	w   io.Writer
	err error
}

func (e *errRecorder) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil {
		e.err = err
	}
	return n, err
}

func closeFile(fw FileWriter, to, member string, want int64) (Published, error) {
	digest, size, err := fw.Close()
	if err != nil {
		return Published{}, fmt.Errorf("finishing file %q from archive member %q: %w", to, member, err)
	}
	if size != want {
		return Published{}, fmt.Errorf("file %q from archive member %q has %d bytes but the tar header says %d; the sink lost or invented data", to, member, size, want)
	}
	return Published{Name: to, Digest: digest, Size: size}, nil
}

// drain reads past the end-of-archive marker to the end of the download: the caller hashes everything r
// yields, and the rest of the compressed stream still has checksums that can reveal corruption.
func drain(data, raw io.Reader) error {
	if _, err := io.Copy(io.Discard, data); err != nil && !trailingGarbage(err) {
		return fmt.Errorf("reading past the end of the tar archive: %w; the download is corrupt or truncated", err)
	}
	if _, err := io.Copy(io.Discard, raw); err != nil {
		return fmt.Errorf("reading the rest of the download after the tar archive: %w", err)
	}
	return nil
}

// trailingGarbage reports whether err is a decompressor finding something other than a new gzip member or
// zstd frame after a complete, checksummed one. Like gzip(1), we accept that: it is padding (some tools pad
// to a block size), and every byte of the tar archive has been read and verified by then.
func trailingGarbage(err error) bool {
	return errors.Is(err, gzip.ErrHeader) || errors.Is(err, zstd.ErrMagicMismatch)
}

// published returns the files in rule order, or an error for each rule that matched nothing.
func (x *extraction) published() ([]Published, error) {
	pubs := make([]Published, len(x.rules))
	var errs []error
	for i, c := range x.claims {
		if c.member == "" {
			errs = append(errs, x.unmatched(x.rules[i]))
		}
		pubs[i] = c.published
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return pubs, nil
}

func (x *extraction) unmatched(rule Rule) error {
	if x.nmembers == 0 {
		return fmt.Errorf("extract rule from=%q matched no member of the archive: the archive has no members", rule.From)
	}
	quoted := make([]string, len(x.seen))
	for i, name := range x.seen {
		quoted[i] = fmt.Sprintf("%q", name)
	}
	list := strings.Join(quoted, ", ")
	if more := x.nmembers - len(x.seen); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Errorf("extract rule from=%q matched no member of the archive; a From without \"/\" matches base names, one with \"/\" whole paths; members: %s", rule.From, list)
}

// abortAll discards every file written, closed or not: none of them may be published from a failed archive.
func (x *extraction) abortAll() {
	for _, fw := range x.writers {
		fw.Abort()
	}
}
