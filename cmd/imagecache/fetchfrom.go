package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"imagecache.io/imagecache/internal/files"
)

// setVersionHeader is the header with which an imagecache names the version of the file set a file was
// served from (internal/files sends it with every answer for /files/<set>/<file>, a 304 included).
const setVersionHeader = "X-Set-Version"

// fromRounds bounds how often runFrom asks again when the cache publishes a new version of its set between
// two requests. A refresh takes a download, so several in a row mean the set is refreshed far too often.
const fromRounds = 3

// fromFile is one output fetched from the cache. Each has a sink of its own, so that the one that came from
// an older version can be thrown away and fetched again without fetching the other (a 500 MB initramfs).
type fromFile struct {
	download *files.Download
	sink     *files.DirSink
	version  string // the answer's X-Set-Version; "" when the server sent none
}

// runFrom fetches the kernel and initramfs from a running imagecache, one GET each, and publishes them only
// when both answers come from one version of the cache's file set. The cache switches versions atomically
// for each request, but a refresh can land between the two requests: then what came from the older version
// is fetched again (conditionally, so an unchanged file costs a 304), for at most fromRounds rounds.
func (p *fetchPlan) runFrom(ctx context.Context, log *slog.Logger, fetcher *files.Fetcher, prev *fetchState) (*fetchState, fetchSummary, error) {
	got := make([]*fromFile, len(p.sources))
	defer func() {
		for _, f := range got {
			if f != nil {
				f.sink.Discard() // after Publish there is nothing left to discard
			}
		}
	}()
	transport := http.DefaultTransport.(*http.Transport).Clone() // honours HTTP(S)_PROXY and NO_PROXY, as files.Fetcher's own
	again := make([]int, len(p.sources))
	for i := range again {
		again[i] = i
	}
	for round := 1; ; round++ {
		latest := ""
		for _, i := range again {
			f, err := p.fetchFromCache(ctx, log, fetcher, transport, prev, i)
			if err != nil {
				return nil, nil, err
			}
			if got[i] != nil {
				got[i].sink.Discard()
			}
			got[i], latest = f, f.version
		}
		if again = p.olderThan(got, latest); len(again) == 0 {
			break
		}
		if round == fromRounds {
			return nil, nil, &mixedVersionsError{from: p.fromBase(), rounds: round, seen: p.versions(got)}
		}
		log.Info("the cache published a new version of its file set between the requests: fetching again what came from the older version",
			"versions", p.versions(got), "again", p.names(again))
	}
	version := p.setVersion(log, got)
	for _, f := range got {
		if err := f.sink.Publish(); err != nil {
			return nil, nil, fmt.Errorf("%w (nothing or only part was replaced; run again)", err)
		}
	}
	downloads := make([]*files.Download, len(got))
	for i, f := range got {
		downloads[i] = f.download
	}
	next, summary, err := p.nextState(prev, downloads)
	if next != nil {
		next.SetVersion = version
	}
	return next, summary, err
}

// fetchFromCache fetches output i into a new sink and notes the set version the answer came from, which
// files.Fetcher does not report: a RoundTripper of this request's own sees the response's header.
func (p *fetchPlan) fetchFromCache(ctx context.Context, log *slog.Logger, fetcher *files.Fetcher, transport http.RoundTripper, prev *fetchState, i int) (*fromFile, error) {
	src := p.sources[i]
	cond := p.conditional(prev, src)
	log.Info("fetching", "url", src.URL, "dir", p.dir, "ifNoneMatch", cond.ETag, "ifModifiedSince", cond.LastModified)
	rec := &versionRecorder{base: transport}
	f := *fetcher
	f.Client = &http.Client{Transport: rec}
	sink := files.NewDirSink(p.dir)
	d, err := fetchSource(ctx, &f, src, cond, sink)
	if err != nil {
		sink.Discard()
		return nil, err
	}
	return &fromFile{download: d, sink: sink, version: rec.version()}, nil
}

// olderThan lists the outputs whose answer came from another version than latest, the most recent answer's.
// Versions only move forward and the requests were sent one after the other, so those are the older ones.
// When the server names no version there is nothing to compare (setVersion warns about it).
func (p *fetchPlan) olderThan(got []*fromFile, latest string) []int {
	var older []int
	for i, f := range got {
		if f.version == "" || latest == "" {
			return nil
		}
		if f.version != latest {
			older = append(older, i)
		}
	}
	return older
}

// setVersion is the one version every output came from, or "" with a warning when the server named none.
func (p *fetchPlan) setVersion(log *slog.Logger, got []*fromFile) string {
	for _, f := range got {
		if f.version == "" {
			log.Warn("the server names no set version ("+setVersionHeader+"): cannot check that the kernel and initramfs are of one version; is --from an imagecache?", "from", p.fromBase())
			return ""
		}
	}
	return got[0].version
}

// versions says which version each output came from, for messages: "ironic-python-agent.kernel=3 ...".
func (p *fetchPlan) versions(got []*fromFile) string {
	parts := make([]string, len(got))
	for i, f := range got {
		parts[i] = p.outputs[i] + "=" + f.version
	}
	return strings.Join(parts, " ")
}

func (p *fetchPlan) names(idx []int) string {
	names := make([]string, len(idx))
	for i, n := range idx {
		names[i] = p.outputs[n]
	}
	return strings.Join(names, " ")
}

// fromBase is the --from URL, the file set's, for messages.
func (p *fetchPlan) fromBase() string {
	return strings.TrimSuffix(p.sources[0].URL, "/"+p.outputs[0])
}

// mixedVersionsError is a cache that published a new version of its set between the requests of every round:
// the files of one version could not be had, so nothing was published.
type mixedVersionsError struct {
	from   string
	rounds int
	seen   string
}

func (e *mixedVersionsError) Error() string {
	return fmt.Sprintf("the cache at %s published a new version of its file set between the requests in each of %d rounds (last seen: %s), and a kernel and initramfs of different versions must not be published together",
		e.from, e.rounds, e.seen)
}

// versionRecorder passes requests to base and keeps the X-Set-Version of the last answer (after redirects,
// the final one's).
type versionRecorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	last string
}

func (v *versionRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := v.base.RoundTrip(req)
	if err == nil {
		v.mu.Lock()
		v.last = resp.Header.Get(setVersionHeader)
		v.mu.Unlock()
	}
	return resp, err
}

func (v *versionRecorder) version() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.last
}
