package e2e

import (
	"fmt"
	"io"
	"net/http"
	"testing"
)

// BenchmarkHitPath measures serving content that is already cached, for imagecache and for its peer, the
// CNCF distribution registry in proxy mode, both in front of the same upstream registry and both warmed
// first. Both log one access line per request. Compare the two in the same run (the machine is noisy):
//
//	go test -run XXX -bench HitPath -benchtime 3000x ./test/e2e/
func BenchmarkHitPath(b *testing.B) {
	upstream := startRegistry(b, registryOpts{})
	manifestDigest, layerDigest := pushBigImage(b, upstream.Host, "bench/app:v1", 1<<20)
	peer := startRegistry(b, registryOpts{proxyRemote: upstream.URL})
	ours := startImagecache(b, fmt.Sprintf("upstreams:\n  - {name: upstream.test, url: %q, default: true}\n", upstream.URL))

	servers := []struct{ name, url string }{{"imagecache", ours.URL}, {"distribution-proxy", peer.URL}}
	paths := []struct {
		name, path string
		size       int64
	}{
		{"blob-1MiB", "/v2/bench/app/blobs/" + layerDigest, 1 << 20},
		{"manifest-by-digest", "/v2/bench/app/manifests/" + manifestDigest, 0},
		{"manifest-by-tag", "/v2/bench/app/manifests/v1", 0},
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	fetch := func(b *testing.B, url string) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: %d", url, resp.StatusCode)
		}
	}
	for _, p := range paths {
		for _, s := range servers {
			fetch(b, s.url+p.path) // warm: the first request fetches from the upstream
			b.Run(p.name+"/"+s.name, func(b *testing.B) {
				if p.size > 0 {
					b.SetBytes(p.size)
				}
				b.SetParallelism(4)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						fetch(b, s.url+p.path)
					}
				})
			})
		}
	}
}
