package files

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// extractSink is an in-memory Sink that hashes what it is given (so that big members cost no memory) and
// records how each writer ended, so that tests can check none is left open or, after an error, kept.
type extractSink struct {
	writers    []*extractWriter
	failCreate string // Create of this name fails
	failWrite  string // writes to this name fail
	miscount   int64  // Close reports this many bytes more than written
}

type extractWriter struct {
	name      string
	sizeHint  int64
	h         hash.Hash
	n         int64
	failWrite bool
	miscount  int64
	closed    int // Close calls
	aborted   int // Abort calls
}

func (s *extractSink) Create(name string, size int64) (FileWriter, error) {
	if name == s.failCreate {
		return nil, errors.New("disk full")
	}
	w := &extractWriter{name: name, sizeHint: size, h: sha256.New(), failWrite: name == s.failWrite, miscount: s.miscount}
	s.writers = append(s.writers, w)
	return w, nil
}

func (w *extractWriter) Write(p []byte) (int, error) {
	if w.closed > 0 || w.aborted > 0 {
		return 0, fmt.Errorf("write to %q after Close or Abort", w.name)
	}
	if w.failWrite {
		return 0, errors.New("disk full")
	}
	w.n += int64(len(p))
	return w.h.Write(p)
}

func (w *extractWriter) Close() (string, int64, error) {
	w.closed++
	return "sha256:" + hex.EncodeToString(w.h.Sum(nil)), w.n + w.miscount, nil
}

func (w *extractWriter) Abort() { w.aborted++ }

// check asserts that every writer was finished exactly once by Close or Abort (Abort may follow Close), and,
// after an error, that every one was aborted, so nothing of a failed archive can be published.
func (s *extractSink) check(t *testing.T, failed bool) {
	t.Helper()
	for _, w := range s.writers {
		switch {
		case w.closed > 1 || w.aborted > 1:
			t.Errorf("writer %q closed %d times, aborted %d times; want at most once each", w.name, w.closed, w.aborted)
		case failed && w.aborted == 0:
			t.Errorf("writer %q not aborted after Extract failed", w.name)
		case !failed && w.aborted > 0:
			t.Errorf("writer %q aborted although Extract succeeded", w.name)
		case !failed && w.closed == 0:
			t.Errorf("writer %q never closed", w.name)
		}
	}
}

// countingReader counts the bytes read through it and whether it reached EOF.
type countingReader struct {
	r   io.Reader
	n   int64
	eof bool
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err == io.EOF {
		c.eof = true
	}
	return n, err
}

// entry is one tar member to build; typ defaults to a regular file.
type entry struct {
	name string
	typ  byte
	body string
	link string
}

func reg(name, body string) entry   { return entry{name: name, body: body} }
func symlink(name, to string) entry { return entry{name: name, typ: tar.TypeSymlink, link: to} }
func dir(name string) entry         { return entry{name: name, typ: tar.TypeDir} }

func makeTar(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644}
		if e.typ == 0 {
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zstded(t testing.TB, b []byte) []byte {
	t.Helper()
	zw, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer zw.Close()
	return zw.EncodeAll(b, nil)
}

func plain(_ testing.TB, b []byte) []byte { return b }

func join(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

const (
	kernel    = "kernel bytes"
	initramfs = "initramfs bytes, a few more of them"
)

var ipaRules = []Rule{
	// Deliberately not in archive order, to check the result follows rule order.
	{From: "*.initramfs", To: "ironic-python-agent.initramfs"},
	{From: "*.kernel", To: "ironic-python-agent.kernel"},
}

var ipaPublished = []Published{
	{Name: "ironic-python-agent.initramfs", Digest: sha(initramfs), Size: int64(len(initramfs))},
	{Name: "ironic-python-agent.kernel", Digest: sha(kernel), Size: int64(len(kernel))},
}

func ipaTar(t testing.TB, prefix string) []byte {
	var entries []entry
	if prefix != "" {
		entries = append(entries, dir(prefix))
	}
	return makeTar(t, append(entries,
		reg(prefix+"ipa-centos9-master.kernel", kernel),
		// A symlink no rule matches is fine.
		symlink(prefix+"latest", "ipa-centos9-master.kernel"),
		reg(prefix+"ipa-centos9-master.initramfs", initramfs),
	)...)
}

func TestExtract(t *testing.T) {
	compressions := map[string]func(testing.TB, []byte) []byte{"plain": plain, "gzip": gzipped, "zstd": zstded}
	for cname, compress := range compressions {
		for _, prefix := range []string{"", "./", "dir/", "./dir/sub/"} {
			t.Run(fmt.Sprintf("%s/prefix=%q", cname, prefix), func(t *testing.T) {
				checkExtract(t, compress(t, ipaTar(t, prefix)), ipaRules, ipaPublished)
			})
		}
	}

	twoDirs := makeTar(t,
		reg("amd64/ipa.kernel", "amd64 "+kernel),
		reg("arm64/ipa.kernel", "arm64 "+kernel),
	)
	// Trailing bytes after the archive: zero blocks as GNU tar pads to its record size, then whatever a server
	// or a tape appended after the compressed stream.
	padding := make([]byte, 10240)
	garbage := []byte("trailing garbage that is neither tar nor gzip nor zstd")
	ipa := ipaTar(t, "./")
	half := len(ipa) / 2
	tests := []struct {
		name    string
		archive []byte
		rules   []Rule
		want    []Published
	}{{
		name:    "from with a slash picks one of same-named members",
		archive: gzipped(t, twoDirs),
		rules:   []Rule{{From: "arm64/*.kernel", To: "kernel"}},
		want:    []Published{{Name: "kernel", Digest: sha("arm64 " + kernel), Size: int64(len("arm64 " + kernel))}},
	}, {
		name:    "from with a ./ prefix",
		archive: twoDirs,
		rules:   []Rule{{From: "./amd64/ipa.kernel", To: "kernel"}},
		want:    []Published{{Name: "kernel", Digest: sha("amd64 " + kernel), Size: int64(len("amd64 " + kernel))}},
	}, {
		name:    "one member under two names",
		archive: gzipped(t, ipa),
		rules:   []Rule{{From: "*.kernel", To: "a"}, {From: "ipa-centos9-*.kernel", To: "b"}},
		want: []Published{
			{Name: "a", Digest: sha(kernel), Size: int64(len(kernel))},
			{Name: "b", Digest: sha(kernel), Size: int64(len(kernel))},
		},
	}, {
		name:    "plain tar with garbage after it",
		archive: join(ipa, padding, garbage),
		rules:   ipaRules,
		want:    ipaPublished,
	}, {
		name:    "gzip with zero padding inside and after",
		archive: join(gzipped(t, join(ipa, padding)), padding),
		rules:   ipaRules,
		want:    ipaPublished,
	}, {
		name:    "gzip with garbage after",
		archive: join(gzipped(t, ipa), garbage),
		rules:   ipaRules,
		want:    ipaPublished,
	}, {
		name:    "gzip in two members",
		archive: join(gzipped(t, ipa[:half]), gzipped(t, ipa[half:])),
		rules:   ipaRules,
		want:    ipaPublished,
	}, {
		name:    "zstd with garbage after",
		archive: join(zstded(t, join(ipa, padding)), garbage),
		rules:   ipaRules,
		want:    ipaPublished,
	}, {
		name:    "zstd in two frames",
		archive: join(zstded(t, ipa[:half]), zstded(t, ipa[half:])),
		rules:   ipaRules,
		want:    ipaPublished,
	}, {
		name:    "empty member",
		archive: makeTar(t, reg("empty", "")),
		rules:   []Rule{{From: "empty", To: "e"}},
		want:    []Published{{Name: "e", Digest: sha(""), Size: 0}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkExtract(t, tt.archive, tt.rules, tt.want)
		})
	}
}

// checkExtract runs a successful Extract and checks its result, the sink, and that it read the whole archive.
func checkExtract(t *testing.T, archive []byte, rules []Rule, want []Published) {
	t.Helper()
	sink := &extractSink{}
	r := &countingReader{r: bytes.NewReader(archive)}
	got, err := Extract(r, rules, sink)
	if err != nil {
		t.Fatalf("Extract: %v", err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Extract =\n%v\nwant\n%v", got, want)
	}
	if r.n != int64(len(archive)) || !r.eof {
		t.Errorf("Extract read %d bytes of %d (EOF seen: %v); want the whole download", r.n, len(archive), r.eof)
	}
	if len(sink.writers) != len(want) {
		t.Errorf("Extract created %d files, want %d", len(sink.writers), len(want))
	}
	for _, w := range sink.writers {
		if w.sizeHint != w.n {
			t.Errorf("Create(%q) got size %d, wrote %d", w.name, w.sizeHint, w.n)
		}
	}
	sink.check(t, false)
}

func TestExtractErrors(t *testing.T) {
	ipa := makeTar(t,
		reg("ipa.kernel", kernel),
		reg("ipa.initramfs", initramfs),
	)
	big := makeTar(t, reg("ipa.initramfs", strings.Repeat("x", 100000)))
	gz := gzipped(t, ipa)
	bigGz := gzipped(t, big)
	badCRC := bytes.Clone(gz)
	badCRC[len(badCRC)-8] ^= 0xff // the CRC-32 in the gzip trailer
	tests := []struct {
		name    string
		archive []byte
		rules   []Rule
		sink    extractSink
		want    []string // substrings of the error
	}{{
		name:    "no rules",
		archive: ipa,
		want:    []string{"no extract rules"},
	}, {
		name:    "dot-dot member not matched by any rule",
		archive: makeTar(t, reg("ipa.kernel", kernel), reg("x/../../etc/passwd", "root")),
		rules:   []Rule{{From: "*.kernel", To: "kernel"}},
		want:    []string{`"x/../../etc/passwd"`, `".." path component`, "refusing the whole archive"},
	}, {
		name:    "absolute member",
		archive: gzipped(t, makeTar(t, reg("ipa.kernel", kernel), reg("/etc/passwd", "root"))),
		rules:   []Rule{{From: "*.kernel", To: "kernel"}},
		want:    []string{`"/etc/passwd"`, "absolute path"},
	}, {
		name:    "symlink matched",
		archive: makeTar(t, reg("ipa-real.kernel", kernel), symlink("ipa.kernel", "ipa-real.kernel")),
		rules:   []Rule{{From: "ipa.kernel", To: "kernel"}},
		want:    []string{`"ipa.kernel"`, `from="ipa.kernel"`, `is a symlink to "ipa-real.kernel"; only regular files can be published`},
	}, {
		name: "hard link matched",
		archive: makeTar(t, reg("ipa-real.kernel", kernel),
			entry{name: "ipa.kernel", typ: tar.TypeLink, link: "ipa-real.kernel"}),
		rules: []Rule{{From: "ipa.kernel", To: "kernel"}},
		want:  []string{`is a hard link to "ipa-real.kernel"`},
	}, {
		name:    "directory matched",
		archive: makeTar(t, dir("ipa.kernel/")),
		rules:   []Rule{{From: "*.kernel", To: "kernel"}},
		want:    []string{`"ipa.kernel" matched by extract rule from="*.kernel" is a directory`},
	}, {
		name:    "two members match one rule",
		archive: makeTar(t, reg("a/ipa.kernel", kernel), reg("b/ipa.kernel", kernel)),
		rules:   []Rule{{From: "ipa.kernel", To: "kernel"}},
		want:    []string{`from="ipa.kernel" matches both archive members "a/ipa.kernel" and "b/ipa.kernel"`},
	}, {
		name:    "rule matching nothing",
		archive: gz,
		rules:   []Rule{{From: "*.kernel", To: "kernel"}, {From: "*.vmlinuz", To: "vmlinuz"}},
		want:    []string{`extract rule from="*.vmlinuz" matched no member of the archive`, `"ipa.kernel", "ipa.initramfs"`},
	}, {
		name: "rule matching nothing lists at most 10 members",
		archive: makeTar(t, reg("m00", ""), reg("m01", ""), reg("m02", ""), reg("m03", ""), reg("m04", ""),
			reg("m05", ""), reg("m06", ""), reg("m07", ""), reg("m08", ""), reg("m09", ""), reg("m10", ""), reg("m11", "")),
		rules: []Rule{{From: "*.kernel", To: "kernel"}},
		want:  []string{`"m09" and 2 more`},
	}, {
		name:    "empty archive",
		archive: nil,
		rules:   []Rule{{From: "*.kernel", To: "kernel"}},
		want:    []string{`from="*.kernel" matched no member of the archive: the archive has no members`},
	}, {
		name:    "truncated gzip",
		archive: bigGz[:len(bigGz)/2],
		rules:   []Rule{{From: "*.initramfs", To: "initramfs"}},
		want:    []string{`reading archive member "ipa.initramfs"`, "unexpected EOF", "corrupt or truncated"},
	}, {
		name:    "gzip truncated after the tar end",
		archive: gz[:len(gz)-4],
		rules:   []Rule{{From: "*.kernel", To: "kernel"}},
		want:    []string{"reading past the end of the tar archive", "unexpected EOF"},
	}, {
		name:    "gzip checksum mismatch",
		archive: badCRC,
		rules:   []Rule{{From: "*.kernel", To: "kernel"}},
		want:    []string{"checksum"},
	}, {
		name:    "truncated zstd",
		archive: zstded(t, big)[:20],
		rules:   []Rule{{From: "*.initramfs", To: "initramfs"}},
		want:    []string{"corrupt or truncated"},
	}, {
		name:    "truncated tar member data",
		archive: big[:512+50000],
		rules:   []Rule{{From: "*.initramfs", To: "initramfs"}},
		want:    []string{`reading archive member "ipa.initramfs"`, "unexpected EOF"},
	}, {
		name:    "truncated tar member data of an unmatched member",
		archive: big[:512+50000],
		rules:   []Rule{{From: "*.kernel", To: "kernel"}},
		want:    []string{`reading the tar archive after member "ipa.initramfs"`, "unexpected EOF"},
	}, {
		name:    "corrupt tar header",
		archive: append(bytes.Clone(ipa[:512]), bytes.Repeat([]byte("junk"), 1024)...),
		rules:   []Rule{{From: "*.kernel", To: "kernel"}},
		want:    []string{"corrupt or truncated"},
	}, {
		name:    "sink create fails",
		archive: ipa,
		rules:   ipaRules,
		sink:    extractSink{failCreate: "ironic-python-agent.kernel"},
		want:    []string{`creating file "ironic-python-agent.kernel" for archive member "ipa.kernel": disk full`},
	}, {
		name:    "sink write fails after another file closed",
		archive: ipa,
		rules:   ipaRules,
		sink:    extractSink{failWrite: "ironic-python-agent.initramfs"},
		want:    []string{`writing archive member "ipa.initramfs" to the store: disk full`},
	}, {
		name:    "sink miscounts",
		archive: ipa,
		rules:   ipaRules,
		sink:    extractSink{miscount: -1},
		want:    []string{`file "ironic-python-agent.kernel" from archive member "ipa.kernel" has 11 bytes but the tar header says 12`},
	}, {
		name:    "rule matching nothing does not list the root directory",
		archive: ipaTar(t, "./"),
		rules:   []Rule{{From: "*.vmlinuz", To: "vmlinuz"}},
		want:    []string{`members: "ipa-centos9-master.kernel", "latest", "ipa-centos9-master.initramfs"`},
	}, {
		name:    "error after a file was closed aborts it",
		archive: makeTar(t, reg("ipa.kernel", kernel), reg("ipa.initramfs", initramfs), reg("/abs", "")),
		rules:   ipaRules,
		want:    []string{`"/abs" has an absolute path`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := &tt.sink
			got, err := Extract(bytes.NewReader(tt.archive), tt.rules, sink)
			if err == nil {
				t.Fatalf("Extract = %v, want an error", got)
			}
			t.Logf("error: %v", err)
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Extract error %q does not contain %q", err, w)
				}
			}
			sink.check(t, true)
		})
	}
}

// TestExtractWrapsCause checks that the cause of a read error can be inspected.
func TestExtractWrapsCause(t *testing.T) {
	big := makeTar(t, reg("ipa.initramfs", strings.Repeat("x", 100000)))
	_, err := Extract(bytes.NewReader(big[:1000]), []Rule{{From: "*", To: "f"}}, &extractSink{})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Extract error %v does not wrap io.ErrUnexpectedEOF", err)
	}
}

// TestExtractInsecurePathGODEBUG checks that an unsafe member is reported as such when archive/tar flags it
// itself too.
func TestExtractInsecurePathGODEBUG(t *testing.T) {
	t.Setenv("GODEBUG", "tarinsecurepath=0")
	for _, name := range []string{"/etc/passwd", "../etc/passwd"} {
		archive := makeTar(t, reg(name, "root"))
		_, err := Extract(bytes.NewReader(archive), []Rule{{From: "*.kernel", To: "kernel"}}, &extractSink{})
		if err == nil || !strings.Contains(err.Error(), "refusing the whole archive") {
			t.Errorf("Extract of %q: error %v, want it refused as unsafe", name, err)
		}
	}
	checkExtract(t, ipaTar(t, "./"), ipaRules, ipaPublished)
}

// TestExtractStreamsBigMember writes a 20 MiB member through a pipe and checks that Extract did not hold it
// in memory.
func TestExtractStreamsBigMember(t *testing.T) {
	const size = 20 << 20
	pr, pw := io.Pipe()
	want := sha256.New()
	go func() {
		pw.CloseWithError(writeBigArchive(pw, want, size))
	}()
	sink := &extractSink{}
	r := &countingReader{r: pr}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, err := Extract(r, []Rule{{From: "*.initramfs", To: "initramfs"}}, sink)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatalf("Extract: %v", err)
	}
	wantPub := []Published{{Name: "initramfs", Digest: "sha256:" + hex.EncodeToString(want.Sum(nil)), Size: size}}
	if fmt.Sprint(got) != fmt.Sprint(wantPub) {
		t.Errorf("Extract = %v, want %v", got, wantPub)
	}
	if !r.eof {
		t.Errorf("Extract stopped after %d bytes, before the end of the download", r.n)
	}
	// The writer goroutine's gzip state is counted too; both together are far below the member's size.
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d bytes while extracting a %d-byte member", alloc, size)
	if alloc > size/2 {
		t.Errorf("Extract allocated %d bytes for a %d-byte member; it should stream", alloc, size)
	}
	sink.check(t, false)
}

// writeBigArchive writes a gzipped tar with one member of size bytes of varied content to w, also hashing the
// member into h.
func writeBigArchive(w io.Writer, h hash.Hash, size int) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "./ipa.initramfs", Typeflag: tar.TypeReg, Size: int64(size), Mode: 0o644}); err != nil {
		return err
	}
	chunk := make([]byte, 64<<10)
	for i := 0; i < size/len(chunk); i++ {
		for j := range chunk {
			chunk[j] = byte(i*31 + j*7 + j>>8)
		}
		h.Write(chunk)
		if _, err := tw.Write(chunk); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}
