package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"imagecache.io/imagecache/internal/files"
	"imagecache.io/imagecache/internal/progress"
)

// The defaults of metal3's ironic-ipa-downloader (get-resource.sh), which fetch replaces.
const (
	defaultIPABaseURI   = "https://tarballs.opendev.org/openstack/ironic-python-agent/dib"
	defaultIPABranch    = "master"
	defaultIPAFlavor    = "centos9"
	defaultSharedDir    = "/shared"
	ipaDestName         = "ironic-python-agent"
	fetchStateSuffix    = ".imagecache.json"
	fetchDefaultTimeout = 30 * time.Second
)

type fetchOptions struct {
	baseURI, branch, flavor, filename, arch, sharedDir string
	sha256, checksumURL, from                          string
	timeout                                            time.Duration
}

func newFetchCommand() *cobra.Command {
	var o fetchOptions
	cmd := &cobra.Command{
		Use:   "fetch",
		Short: "Download the Ironic Python Agent kernel and initramfs once (a drop-in for metal3's ironic-ipa-downloader)",
		Long: `Download the Ironic Python Agent (IPA) tarball, extract its kernel and initramfs and publish them as
${SHARED_DIR}/html/images/ironic-python-agent.kernel and .initramfs, the layout metal3's Ironic serves.
It reads the environment of metal3's ironic-ipa-downloader init container, so it can replace it as is:

  IPA_BASEURI   where the tarballs are (default ` + defaultIPABaseURI + `)
  IPA_BRANCH    the IPA branch; every "/" becomes "-" (default ` + defaultIPABranch + `)
  IPA_FLAVOR    the IPA image flavor (default ` + defaultIPAFlavor + `)
  IPA_FILENAME  the tarball (default ipa-${IPA_FLAVOR}-${IPA_BRANCH}.tar.gz; FILENAME is read too)
  IPA_ARCH      when set, publish ironic-python-agent_${IPA_ARCH}.kernel and .initramfs instead
  SHARED_DIR    the shared volume (default ` + defaultSharedDir + `)
  HTTP_PROXY, HTTPS_PROXY, NO_PROXY (or lower case)

Flags override the environment. A run remembers the download's ETag and Last-Modified in
${SHARED_DIR}/html/images/.ironic-python-agent[_${IPA_ARCH}]` + fetchStateSuffix + `, so the next run asks
conditionally and an unchanged tarball costs one request and no transfer. The kernel and initramfs are
replaced together, only after both were downloaded and verified.

With --from, the files come from a running imagecache instead: the kernel and initramfs are downloaded as
they are from <from>/ironic-python-agent[_${IPA_ARCH}].kernel and .initramfs, and --base-uri, --branch,
--flavor and --filename are ignored (the cache's file set decides what is served). Both must come from one
version of the cache's file set (the X-Set-Version it answers with): when the cache publishes a new version
between the two requests, the file of the older version is fetched again, for up to ` + strconv.Itoa(fromRounds) + ` rounds, and
nothing is published until the two match.

Exit status: 0 when the files were published or were already up to date, and also when the upstream
could not be reached but an earlier copy exists (a warning says so); 2 when the command line is wrong
(unknown flag, an argument, a flag value that does not parse), and nothing is downloaded; 1 otherwise,
with a message saying what failed, and the existing files left as they were.`,
		Example: `  # as metal3's init container: the environment says what to download
  IPA_BRANCH=stable/2025.1 SHARED_DIR=/shared imagecache fetch

  # an aarch64 agent next to the x86_64 one
  imagecache fetch --arch aarch64 --shared-dir /shared

  # verify the tarball against the published checksum
  imagecache fetch --checksum-url https://tarballs.opendev.org/openstack/ironic-python-agent/dib/ipa-centos9-master.tar.gz.sha256

  # from an imagecache in the cluster that caches the tarball as the file set "ipa"
  imagecache fetch --from http://imagecache.imagecache:5000/files/ipa`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.applyEnv(cmd.Flags().Changed, os.Getenv)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return fetchIPA(ctx, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.baseURI, "base-uri", "", "where the tarballs are (env IPA_BASEURI; default "+defaultIPABaseURI+")")
	f.StringVar(&o.branch, "branch", "", `IPA branch; "/" becomes "-" (env IPA_BRANCH; default `+defaultIPABranch+")")
	f.StringVar(&o.flavor, "flavor", "", "IPA image flavor (env IPA_FLAVOR; default "+defaultIPAFlavor+")")
	f.StringVar(&o.filename, "filename", "", "tarball name (env IPA_FILENAME or FILENAME; default ipa-<flavor>-<branch>.tar.gz)")
	f.StringVar(&o.arch, "arch", "", "publish ironic-python-agent_<arch>.kernel/.initramfs (env IPA_ARCH; default: no suffix)")
	f.StringVar(&o.sharedDir, "shared-dir", "", "shared volume; files go to <dir>/html/images (env SHARED_DIR; default "+defaultSharedDir+")")
	f.StringVar(&o.sha256, "sha256", "", "expected sha256 of the tarball (64 hex digits)")
	f.StringVar(&o.checksumURL, "checksum-url", "", "URL of a sha256sum file listing the tarball's checksum")
	f.DurationVar(&o.timeout, "timeout", fetchDefaultTimeout, "how long to wait for the server's first answer, and for any stall in a transfer")
	f.StringVar(&o.from, "from", "", "take the kernel and initramfs from this imagecache file set URL (e.g. http://imagecache:5000/files/ipa)")
	return cmd
}

// applyEnv fills what no flag set from the environment, then from get-resource.sh's defaults. As in the
// script (${VAR:-default}), an empty variable counts as unset.
func (o *fetchOptions) applyEnv(changed func(flag string) bool, getenv func(string) string) {
	pick := func(dst *string, flag, def string, envs ...string) {
		if changed(flag) && *dst != "" {
			return
		}
		for _, e := range envs {
			if v := getenv(e); v != "" {
				*dst = v
				return
			}
		}
		*dst = def
	}
	pick(&o.baseURI, "base-uri", defaultIPABaseURI, "IPA_BASEURI")
	pick(&o.branch, "branch", defaultIPABranch, "IPA_BRANCH")
	pick(&o.flavor, "flavor", defaultIPAFlavor, "IPA_FLAVOR")
	pick(&o.arch, "arch", "", "IPA_ARCH")
	pick(&o.sharedDir, "shared-dir", defaultSharedDir, "SHARED_DIR")
	o.branch = strings.ReplaceAll(o.branch, "/", "-")
	pick(&o.filename, "filename", "ipa-"+o.flavor+"-"+o.branch+".tar.gz", "IPA_FILENAME", "FILENAME")
}

// fetchPlan is what one run downloads and where it publishes it.
type fetchPlan struct {
	dir     string         // ${SHARED_DIR}/html/images
	outputs []string       // the kernel and initramfs names, in that order
	sources []files.Source // the tarball; or, with --from, one source per output, in the same order
	state   string         // the state file's name in dir
	from    bool
}

var (
	archName  = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
	sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

func (o fetchOptions) plan() (*fetchPlan, error) {
	if o.arch != "" && !archName.MatchString(o.arch) {
		return nil, fmt.Errorf("--arch/IPA_ARCH %q is not an architecture name (want e.g. x86_64 or aarch64)", o.arch)
	}
	dest := ipaDestName
	if o.arch != "" {
		dest += "_" + o.arch
	}
	p := &fetchPlan{
		dir:     filepath.Join(o.sharedDir, "html", "images"),
		outputs: []string{dest + ".kernel", dest + ".initramfs"},
		state:   "." + dest + fetchStateSuffix,
		from:    o.from != "",
	}
	if p.from {
		if err := o.fromSources(p); err != nil {
			return nil, err
		}
		return p, nil
	}
	src := files.Source{
		URL:         strings.TrimSuffix(o.baseURI, "/") + "/" + o.filename,
		SHA256:      strings.ToLower(o.sha256),
		ChecksumURL: o.checksumURL,
		Extract:     []files.Rule{{From: "*.kernel", To: p.outputs[0]}, {From: "*.initramfs", To: p.outputs[1]}},
	}
	if err := files.CheckURL(src.URL); err != nil {
		return nil, fmt.Errorf("--base-uri/IPA_BASEURI: %w", err)
	}
	if o.sha256 != "" && o.checksumURL != "" {
		return nil, errors.New("--sha256 and --checksum-url both say what the tarball must hash to; give one")
	}
	if s := src.SHA256; s != "" && !sha256Hex.MatchString(s) {
		return nil, fmt.Errorf("--sha256 %q is not a sha256 (want 64 hex digits)", o.sha256)
	}
	p.sources = []files.Source{src}
	return p, nil
}

func (o fetchOptions) fromSources(p *fetchPlan) error {
	if o.sha256 != "" || o.checksumURL != "" {
		return errors.New("--sha256 and --checksum-url check a tarball, and --from downloads no tarball (the cache verified it); drop them or put them in the cache's file set")
	}
	base := strings.TrimSuffix(o.from, "/")
	if err := files.CheckURL(base); err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	for _, name := range p.outputs {
		p.sources = append(p.sources, files.Source{URL: base + "/" + name})
	}
	return nil
}

func fetchIPA(ctx context.Context, o fetchOptions) error {
	log, err := newLogger(os.Stderr, "auto", "info")
	if err != nil {
		return err
	}
	p, err := o.plan()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w (check SHARED_DIR/--shared-dir and that the volume is writable)", p.dir, err)
	}
	p.removeLeftovers(log, max(o.timeout, time.Minute))
	prev := p.loadState(log)
	copyTime, haveCopy := p.existingCopy(prev)
	if !haveCopy {
		prev = nil // a half-present copy is no reason to skip a download
	}
	fetcher := &files.Fetcher{Timeout: o.timeout}
	next, summary, err := p.run(ctx, log, fetcher, prev)
	if err != nil {
		return p.failed(log, err, haveCopy, copyTime)
	}
	if err := p.saveState(next); err != nil {
		// The files are published and correct; only the next run's conditional request is lost.
		log.Warn("could not save the download state; the next run downloads again", "error", err)
	}
	attrs := []any{"result", summary.result(), "dir", p.dir, "files", summary}
	if next.SetVersion != "" {
		attrs = append(attrs, "setVersion", next.SetVersion)
	}
	log.Info("fetched", attrs...)
	return nil
}

// fetchState is the JSON file kept next to the published files, so that the next run asks conditionally.
type fetchState struct {
	Sources   []sourceState `json:"sources"`   // one per download: the tarball, or each file with --from
	Files     []fileState   `json:"files"`     // what is published, in output order
	Published time.Time     `json:"published"` // when these files were published
	Checked   time.Time     `json:"checked"`   // when the upstream last confirmed them
	// SetVersion is, with --from, the version of the cache's file set both files came from ("" when the
	// server did not say).
	SetVersion string `json:"setVersion,omitempty"`
}

type sourceState struct {
	URL          string `json:"url"`
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"lastModified,omitempty"`
	Digest       string `json:"digest,omitempty"` // sha256:<hex> of the download
}

type fileState struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	// Status is "downloaded" or "not modified" in the run's summary; it is not saved.
	Status string `json:"status,omitempty"`
}

func (p *fetchPlan) loadState(log *slog.Logger) *fetchState {
	b, err := os.ReadFile(filepath.Join(p.dir, p.state))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var st fetchState
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		log.Warn("ignoring the download state: downloading unconditionally", "file", filepath.Join(p.dir, p.state), "error", err)
		return nil
	}
	return &st
}

// existingCopy reports whether both outputs exist, and since when. The state's Published time is used when
// the state describes the files on disk.
func (p *fetchPlan) existingCopy(st *fetchState) (time.Time, bool) {
	var oldest time.Time
	for _, name := range p.outputs {
		fi, err := os.Stat(filepath.Join(p.dir, name))
		if err != nil || !fi.Mode().IsRegular() {
			return time.Time{}, false
		}
		if oldest.IsZero() || fi.ModTime().Before(oldest) {
			oldest = fi.ModTime()
		}
	}
	if st != nil && p.matches(st) && !st.Published.IsZero() {
		return st.Published, true
	}
	return oldest, true
}

// matches reports whether st describes the files on disk. Sizes are compared, not digests: hashing a
// 500 MB initramfs on every start would cost more than the conditional request saves, and a size catches a
// truncated or replaced file.
func (p *fetchPlan) matches(st *fetchState) bool {
	if len(st.Files) != len(p.outputs) {
		return false
	}
	for i, name := range p.outputs {
		f := st.Files[i]
		fi, err := os.Stat(filepath.Join(p.dir, name))
		if f.Name != name || err != nil || fi.Size() != f.Size {
			return false
		}
	}
	return true
}

// conditional is what to send for src: nothing unless the state describes the files on disk, was made
// for the same URL, and (with --sha256) for a download with that digest.
func (p *fetchPlan) conditional(st *fetchState, src files.Source) files.Conditional {
	if st == nil || !p.matches(st) {
		return files.Conditional{}
	}
	for _, s := range st.Sources {
		if s.URL != src.URL || (src.SHA256 != "" && s.Digest != "sha256:"+src.SHA256) {
			continue
		}
		return files.Conditional{ETag: s.ETag, LastModified: s.LastModified}
	}
	return files.Conditional{}
}

// fetchSummary is the run's outcome, one entry per output.
type fetchSummary []fileState

// LogValue logs each file as a group named after it: files.<name>.digest=... in text, nested objects in JSON.
func (s fetchSummary) LogValue() slog.Value {
	attrs := make([]slog.Attr, 0, len(s))
	for _, f := range s {
		attrs = append(attrs, slog.Group(f.Name, "status", f.Status, "size", f.Size, "digest", f.Digest))
	}
	return slog.GroupValue(attrs...)
}

func (s fetchSummary) result() string {
	changed := 0
	for _, f := range s {
		if f.Status == "downloaded" {
			changed++
		}
	}
	switch changed {
	case 0:
		return "not modified"
	case len(s):
		return "downloaded"
	}
	return "partly downloaded"
}

// run downloads the tarball, extracts the kernel and initramfs and publishes them together; with --from,
// runFrom fetches the two files instead.
func (p *fetchPlan) run(ctx context.Context, log *slog.Logger, fetcher *files.Fetcher, prev *fetchState) (*fetchState, fetchSummary, error) {
	if p.from {
		return p.runFrom(ctx, log, fetcher, prev)
	}
	sink := files.NewDirSink(p.dir)
	defer sink.Discard() // after Publish there is nothing left to discard
	src := p.sources[0]
	cond := p.conditional(prev, src)
	log.Info("fetching", "url", src.URL, "dir", p.dir, "ifNoneMatch", cond.ETag, "ifModifiedSince", cond.LastModified)
	d, err := fetchSource(ctx, fetcher, src, cond, sink)
	if err != nil {
		return nil, nil, err
	}
	if err := sink.Publish(); err != nil {
		return nil, nil, fmt.Errorf("%w (nothing or only part was replaced; run again)", err)
	}
	return p.nextState(prev, []*files.Download{d})
}

// fetchSource downloads one source with a progress report on stderr.
func fetchSource(ctx context.Context, fetcher *files.Fetcher, src files.Source, cond files.Conditional, sink files.Sink) (*files.Download, error) {
	bar := progress.New(os.Stderr, path.Base(src.URL))
	started := false
	f := *fetcher
	f.Progress = func(done, total int64) {
		started = true
		bar.Update(done, total)
	}
	d, err := f.Fetch(ctx, src, cond, sink)
	if started {
		bar.Finish()
	}
	return d, err
}

// nextState records what is published now: the new downloads, and the previous entries of what was not
// modified.
func (p *fetchPlan) nextState(prev *fetchState, downloads []*files.Download) (*fetchState, fetchSummary, error) {
	now := time.Now().UTC()
	next := &fetchState{Checked: now}
	published := map[string]fileState{}
	if prev != nil {
		next.Published = prev.Published
		for _, f := range prev.Files {
			f.Status = "not modified"
			published[f.Name] = f
		}
	}
	for i, d := range downloads {
		src := sourceState{URL: p.sources[i].URL, ETag: d.ETag, LastModified: d.LastModified, Digest: d.SourceDigest}
		if d.NotModified {
			src = p.previousSource(prev, src)
		}
		next.Sources = append(next.Sources, src)
		for _, f := range d.Files {
			published[f.Name] = fileState{Name: f.Name, Digest: f.Digest, Size: f.Size, Status: "downloaded"}
			next.Published = now
		}
	}
	summary := fetchSummary{}
	for _, name := range p.outputs {
		f, ok := published[name]
		if !ok {
			return nil, nil, fmt.Errorf("internal error: %s was neither downloaded nor recorded by an earlier run", name)
		}
		summary = append(summary, f)
		f.Status = ""
		next.Files = append(next.Files, f)
	}
	return next, summary, nil
}

// previousSource keeps the previous record of a source answered 304, taking any validators the 304 sent.
func (p *fetchPlan) previousSource(prev *fetchState, got sourceState) sourceState {
	for _, s := range prev.Sources {
		if s.URL != got.URL {
			continue
		}
		if got.ETag != "" {
			s.ETag = got.ETag
		}
		if got.LastModified != "" {
			s.LastModified = got.LastModified
		}
		return s
	}
	return got
}

// saveState replaces the state file atomically, after the files it describes were published: a crash in
// between leaves an old state whose sizes no longer match, which only costs an unconditional download.
func (p *fetchPlan) saveState(st *fetchState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	sink := files.NewDirSink(p.dir)
	defer sink.Discard()
	w, err := sink.Create(p.state, int64(len(b)+1))
	if err != nil {
		return err
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		w.Abort()
		return err
	}
	if _, _, err := w.Close(); err != nil {
		w.Abort()
		return err
	}
	return sink.Publish()
}

// removeLeftovers deletes the temp files of a run that was killed. A temp file still being written is
// touched by every write, and a stalled transfer is cut after the timeout, so an old one is abandoned.
func (p *fetchPlan) removeLeftovers(log *slog.Logger, olderThan time.Duration) {
	for _, name := range append([]string{p.state}, p.outputs...) {
		matches, _ := filepath.Glob(filepath.Join(p.dir, files.TempPattern(name)))
		for _, m := range matches {
			if fi, err := os.Stat(m); err == nil && time.Since(fi.ModTime()) > olderThan {
				if err := os.Remove(m); err == nil {
					log.Info("removed the leftover of an interrupted run", "file", m)
				}
			}
		}
	}
}

// failed turns a failed download into the exit: a warning and success when the upstream could not be
// reached and an earlier copy is there to serve, else one line saying what failed and what to check.
func (p *fetchPlan) failed(log *slog.Logger, err error, haveCopy bool, copyTime time.Time) error {
	if haveCopy && files.Unreachable(err) {
		log.Warn(fmt.Sprintf("upstream unreachable, keeping the existing copy from %s: %s", copyTime.UTC().Format(time.RFC3339), oneLine(err.Error())), "dir", p.dir)
		return nil
	}
	kept := "nothing was published and there is no earlier copy in " + p.dir
	if haveCopy {
		kept = "the files in " + p.dir + " were left as they were"
	}
	return fmt.Errorf("%s; %s; %s", oneLine(err.Error()), kept, p.hint(err))
}

// hint says what to check for err.
func (p *fetchPlan) hint(err error) string {
	var he *files.HTTPError
	switch {
	case errors.Is(err, context.Canceled):
		return "the run was interrupted"
	case errors.As(err, new(*mixedVersionsError)):
		return "run again; if it keeps happening, check the refreshInterval of the cache's file set"
	case errors.As(err, &he) && !files.Unreachable(err) && p.from:
		return "check --from and that the cache's file set publishes " + strings.Join(p.outputs, " and ")
	case errors.As(err, &he) && !files.Unreachable(err):
		return "check IPA_BASEURI, IPA_BRANCH, IPA_FLAVOR and IPA_FILENAME (or their flags): the server has no such file"
	case files.Unreachable(err) && p.from:
		return "check that the imagecache at " + p.sources[0].URL + " is running and reachable from here (Service, DNS, NO_PROXY)"
	case files.Unreachable(err):
		return "check that " + p.sources[0].URL + " is reachable from here (network, DNS, HTTP_PROXY/HTTPS_PROXY/NO_PROXY) or point --base-uri/IPA_BASEURI or --from at a mirror"
	case p.from:
		return "check the cache's log for its file set"
	}
	return "the download itself is wrong: check --sha256/--checksum-url and that it is an IPA tarball with one *.kernel and one *.initramfs member"
}

// oneLine joins a multi-line error (errors.Join) so that it reads as one log line.
func oneLine(s string) string {
	return strings.ReplaceAll(s, "\n", "; ")
}
