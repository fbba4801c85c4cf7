package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// conformanceContent is what the read-only pull workflow of the OCI conformance runner checks: it cannot
// push, so the content is seeded into the upstream first and named to the runner (OCI_RO_DATA_*).
type conformanceContent struct {
	tags      []string
	manifests []string
	blobs     []string
}

// seedConformance pushes into registryHost/repo an OCI image ("image"), a Docker schema 2 image ("docker")
// and a two-platform OCI index ("index"), and returns every tag, manifest digest and blob digest of them.
func seedConformance(t testing.TB, registryHost, repo string) conformanceContent {
	t.Helper()
	var c conformanceContent
	for _, mt := range []string{"oci", "docker"} {
		tag := map[string]string{"oci": "image", "docker": "docker"}[mt]
		d, img := pushImage(t, registryHost, repo+":"+tag, mt, 2, 2048)
		c.tags = append(c.tags, tag)
		c.manifests = append(c.manifests, d)
		c.blobs = append(c.blobs, blobDigests(t, img)...)
	}
	d, idx := pushIndex(t, registryHost, repo+":index")
	c.tags = append(c.tags, "index")
	c.manifests = append(c.manifests, d)
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, desc := range m.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		c.manifests = append(c.manifests, desc.Digest.String())
		c.blobs = append(c.blobs, blobDigests(t, img)...)
	}
	return c
}

// conformanceEnv is the runner's configuration for pulling read-only content over plain HTTP: everything
// that writes (push, mount, delete) is off, and so is the referrers API (distribution v3.1.2 has none).
func conformanceEnv(host, repo, resultsDir string, c conformanceContent) []string {
	return []string{
		"OCI_REGISTRY=" + host,
		"OCI_TLS=disabled",
		"OCI_REPO1=" + repo,
		"OCI_REPO2=" + repo, // only used by push tests (cross-repository mount); must still be valid
		"OCI_VERSION=1.1",
		"OCI_LOG=warn",
		"OCI_RESULTS_DIR=" + resultsDir,
		"OCI_API_PULL=true",
		"OCI_API_PUSH=false",
		"OCI_API_BLOBS_DELETE=false",
		"OCI_API_BLOBS_MOUNT_ANONYMOUS=false",
		"OCI_API_BLOBS_UPLOAD_CANCEL=false",
		"OCI_API_MANIFESTS_DELETE=false",
		"OCI_API_TAGS_DELETE=false",
		"OCI_API_TAGS_LIST=true",
		"OCI_API_REFERRER=false",
		"OCI_RO_DATA_TAGS=" + strings.Join(c.tags, " "),
		"OCI_RO_DATA_MANIFESTS=" + strings.Join(c.manifests, " "),
		"OCI_RO_DATA_BLOBS=" + strings.Join(c.blobs, " "),
	}
}

// runConformance runs bin/conformance against host (host:port, plain HTTP) for repo as the client names it
// (for the cache possibly "upstream.test/conformance/repo1"), and fails the test naming each failed spec.
//
// Results are read from the tree the runner prints on stdout, not from OCI_RESULTS_DIR: with
// OCI_API_PUSH=false this runner version panics in ReportResultsYAML (the skipped "sha256 blobs" branch sets
// a data status without data) after printing the report and before writing results.yaml, junit.xml or
// report.html. That panic (exit 2) is tolerated; any other non-zero exit fails the test. OCI_RESULTS_DIR
// still points under test-artifacts/ so that a fixed runner leaves its files there.
func runConformance(t testing.TB, host, repo string, c conformanceContent) {
	t.Helper()
	bin := tool(t, "conformance")
	resultsDir := filepath.Join(repoRoot(), "test-artifacts", "conformance", safeName(t.Name()))
	_ = os.RemoveAll(resultsDir)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	// The runner reads ./oci-conformance.yaml if present, and OCI_* from the environment: give it neither
	// from the caller, only what is set here.
	cmd.Dir = t.TempDir()
	cmd.Env = append(withoutOCIEnv(os.Environ()), conformanceEnv(host, repo, resultsDir, c)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	output := func() string { return stdout.String() + "\nstderr:\n" + stderr.String() }

	r := parseConformanceReport(stdout.String())
	if len(r.failed) > 0 {
		t.Fatalf("conformance failures against %s/%s:\n  %s\noutput:\n%s", host, repo, strings.Join(r.failed, "\n  "), output())
	}
	if r.result != "Pass" {
		t.Fatalf("conformance result %q (exit: %v); output:\n%s", r.result, runErr, output())
	}
	if runErr != nil && !strings.Contains(stderr.String(), "ReportResultsYAML") {
		t.Fatalf("conformance exited with %v; output:\n%s", runErr, output())
	}
	// A run that pulled nothing (content not found, everything disabled) must not pass: every tag, manifest
	// and blob is one pull test.
	if want := len(c.tags) + len(c.manifests) + len(c.blobs); r.pulled != want {
		t.Fatalf("conformance ran %d pull tests, want %d; output:\n%s", r.pulled, want, output())
	}
	t.Logf("conformance against %s/%s: %d passed, %d of them pulls", host, repo, r.passed, r.pulled)
}

type conformanceReport struct {
	result string   // "OCI Conformance Result: X"
	failed []string // tests reported FAIL or Error with no failed child: the specific ones
	passed int
	pulled int // passed tests under read-only/pull
}

var reportLine = regexp.MustCompile(`^\s*(OCI Conformance Test(?:/.*)?): (Pass|FAIL|Error|Skip|Disabled|Unknown)$`)

// parseConformanceReport reads the "Test results" tree: one line per test, "  <path>: <status>".
func parseConformanceReport(out string) conformanceReport {
	var r conformanceReport
	var bad []string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "OCI Conformance Result: "); ok {
			r.result = strings.TrimSpace(v)
			continue
		}
		m := reportLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		switch m[2] {
		case "Pass":
			r.passed++
			if strings.Contains(m[1], "/read-only/pull/") {
				r.pulled++
			}
		case "FAIL", "Error":
			bad = append(bad, m[1])
		}
	}
	for _, name := range bad {
		leaf := true
		for _, other := range bad {
			if strings.HasPrefix(other, name+"/") {
				leaf = false
				break
			}
		}
		if leaf && !slices.Contains(r.failed, name) {
			r.failed = append(r.failed, name)
		}
	}
	return r
}

func withoutOCIEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "OCI_") {
			out = append(out, kv)
		}
	}
	return out
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func safeName(s string) string { return unsafeChars.ReplaceAllString(s, "_") }

// TestConformanceAgainstUpstream proves the conformance helper on the real registry, which must pass.
func TestConformanceAgainstUpstream(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	const repo = "conformance/repo1"
	c := seedConformance(t, reg.Host, repo)
	runConformance(t, reg.Host, repo, c)
}

// TestConformanceThroughCache runs the same pull workflow against imagecache in front of the registry,
// addressing the repository both through the default upstream and with the upstream's name as prefix.
func TestConformanceThroughCache(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	const repo = "conformance/repo1"
	c := seedConformance(t, reg.Host, repo)
	cache := startImagecache(t, fmt.Sprintf(`upstreams:
  - name: upstream.test
    url: %s
    default: true
`, reg.URL))
	t.Run("default-upstream", func(t *testing.T) { runConformance(t, cache.Host, repo, c) })
	t.Run("prefix", func(t *testing.T) { runConformance(t, cache.Host, "upstream.test/"+repo, c) })
}

// TestParseConformanceReport keeps the parser honest about failures, which a passing registry never shows.
func TestParseConformanceReport(t *testing.T) {
	out := `Test results
OCI Conformance Test: FAIL
  OCI Conformance Test/ping: Pass
  OCI Conformance Test/read-only: FAIL
    OCI Conformance Test/read-only/pull: FAIL
      OCI Conformance Test/read-only/pull/manifest-by-tag: Pass
      OCI Conformance Test/read-only/pull/blob-get: FAIL
      OCI Conformance Test/read-only/pull/blob-get: Pass
    OCI Conformance Test/read-only/delete: Disabled

OCI Conformance Result: FAIL
`
	r := parseConformanceReport(out)
	if r.result != "FAIL" || r.passed != 3 || r.pulled != 2 {
		t.Errorf("got %+v", r)
	}
	if want := []string{"OCI Conformance Test/read-only/pull/blob-get"}; !slices.Equal(r.failed, want) {
		t.Errorf("failed %q, want %q", r.failed, want)
	}
}
