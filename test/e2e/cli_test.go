package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"imagecache.io/imagecache/test/faultproxy"
)

// cliRun is one run of the imagecache binary as a client: stdout and stderr are pipes, not a terminal.
type cliRun struct {
	args           []string
	stdout, stderr string
	code           int
}

// cli runs `imagecache args...` with env added and returns its output and exit status.
func cli(t testing.TB, env []string, args ...string) cliRun {
	t.Helper()
	return cliIn(t, "", env, args...)
}

// cliIn is cli in the working directory dir ("": the test's), for commands whose defaults are relative paths.
func cliIn(t testing.TB, dir string, env []string, args ...string) cliRun {
	t.Helper()
	return runImagecache(t, dir, append(cleanEnvWithout("IMAGECACHE_"), env...), args...)
}

// runImagecache runs the imagecache binary with exactly the environment env, in dir ("": the test's
// working directory), and returns its output and exit status.
func runImagecache(t testing.TB, dir string, env []string, args ...string) cliRun {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), buildImagecache(t), args...)
	cmd.Dir, cmd.Env = dir, env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	r := cliRun{args: args}
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("imagecache %s: %v", strings.Join(args, " "), err)
	}
	r.stdout, r.stderr = stdout.String(), stderr.String()
	return r
}

// cleanEnvWithout is cleanEnv without the variables whose KEY=VALUE starts with one of prefixes: the
// developer's own IMAGECACHE_SERVER, IPA_BRANCH and the like must not change what a test means.
func cleanEnvWithout(prefixes ...string) []string {
	return slices.DeleteFunc(cleanEnv(), func(kv string) bool {
		return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(kv, p) })
	})
}

func (r cliRun) want(t testing.TB, code int, stderrHas ...string) cliRun {
	t.Helper()
	if r.code != code {
		t.Fatalf("imagecache %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, code, r.stdout, r.stderr)
	}
	for _, s := range stderrHas {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("imagecache %s: stderr does not mention %q:\n%s", strings.Join(r.args, " "), s, r.stderr)
		}
	}
	return r
}

// oneLineError checks that a failure says what is wrong on one line.
func (r cliRun) oneLineError(t testing.TB) {
	t.Helper()
	if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "imagecache: ") {
		t.Errorf("imagecache %s: want one line \"imagecache: ...\" on stderr, got:\n%s", strings.Join(r.args, " "), r.stderr)
	}
}

func (r cliRun) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("imagecache %s: stdout is not the JSON expected: %v\n%s", strings.Join(r.args, " "), err, r.stdout)
	}
}

// cliImage is what `ls -o json` promises per image (the admin API's GET /api/v1/images).
type cliImage struct {
	Name       string    `json:"name"`
	Tags       []string  `json:"tags"`
	Digest     string    `json:"digest"`
	Size       int64     `json:"size"`
	UniqueSize int64     `json:"uniqueSize"`
	Objects    int       `json:"objects"`
	LastUse    time.Time `json:"lastUse"`
	Uses       int64     `json:"uses"`
	Pinned     bool      `json:"pinned"`
	State      string    `json:"state"`
}

// imageBytes is what pulling img moves: its manifest, config and layers.
func imageBytes(t testing.TB, img v1.Image) int64 {
	t.Helper()
	raw, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	n := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n
}

func lsImages(t testing.TB, server string, env ...string) map[string]cliImage {
	t.Helper()
	var list []cliImage
	cli(t, env, "ls", "--server", server, "-o", "json").want(t, 0).json(t, &list)
	out := map[string]cliImage{}
	for _, img := range list {
		out[img.Name] = img
	}
	return out
}

// TestCLIPullLsRefreshRmStats drives the real binary against a real server in front of a real registry,
// with a counting proxy between them.
func TestCLIPullLsRefreshRmStats(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	px := startProxy(t, reg.URL)
	appDigest, app := pushImage(t, reg.Host, "team/app:v1", "oci", 2, 64<<10)
	otherDigest, other := pushImage(t, reg.Host, "team/other:v1", "docker", 1, 4096)
	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, default: true}
policies:
  - match: {tag: "*"}
    pull: Always
    revalidateAfter: 1h
`, px.URL()))

	// pull, to a pipe: plain progress lines on stderr, one result line per image on stdout.
	r := cli(t, nil, "pull", "--server", c.URL, "upstream.test/team/app:v1", "team/other:v1").want(t, 0,
		"pulling upstream.test/team/app:v1", "pulling team/other:v1", "100%", ": done, ")
	if strings.Contains(r.stderr, "\r") {
		t.Errorf("progress to a pipe redraws lines:\n%q", r.stderr)
	}
	m, _ := app.Manifest()
	for _, l := range m.Layers {
		if short := "sha256:" + l.Digest.Hex[:12]; !strings.Contains(r.stderr, short) {
			t.Errorf("no progress line for layer %s:\n%s", short, r.stderr)
		}
	}
	for ref, d := range map[string]string{"upstream.test/team/app:v1": appDigest, "team/other:v1": otherDigest} {
		if !strings.Contains(r.stdout, "pulled "+ref+": "+d) {
			t.Errorf("stdout does not report %s as %s:\n%s", ref, d, r.stdout)
		}
	}
	appBytes, otherBytes := imageBytes(t, app), imageBytes(t, other)

	// ls -o json matches what was pushed and pulled.
	images := lsImages(t, c.URL)
	for name, want := range map[string]struct {
		digest  string
		size    int64
		objects int
	}{"upstream.test/team/app": {appDigest, appBytes, 4}, "upstream.test/team/other": {otherDigest, otherBytes, 3}} {
		got, ok := images[name]
		if !ok {
			t.Fatalf("ls does not list %s: %+v", name, images)
		}
		if got.Digest != want.digest || got.Size != want.size || got.UniqueSize != want.size || got.Objects != want.objects ||
			strings.Join(got.Tags, ",") != "v1" || got.State != "cached" || got.Pinned || time.Since(got.LastUse) > time.Minute {
			t.Errorf("ls %s: %+v, want digest %s, size %d, %d objects, tag v1, cached, unpinned, used just now", name, got, want.digest, want.size, want.objects)
		}
	}
	if len(images) != 2 {
		t.Errorf("ls lists %d images, want 2", len(images))
	}
	table := cli(t, nil, "ls", "--server", c.URL).want(t, 0).stdout
	for _, s := range []string{"NAME", "TAGS", "DIGEST", "SIZE", "LAST USE", "PINNED", "upstream.test/team/app", appDigest[:19], "no"} {
		if !strings.Contains(table, s) {
			t.Errorf("ls table lacks %q:\n%s", s, table)
		}
	}
	wide := cli(t, nil, "ls", "--wide", "--server", c.URL, "upstream.test/team/app").want(t, 0).stdout
	if !strings.Contains(wide, appDigest) || !strings.Contains(wide, "cached") || !strings.Contains(wide, "USES") || strings.Contains(wide, "team/other") {
		t.Errorf("ls --wide upstream.test/team/app:\n%s", wide)
	}
	var yamlOut = cli(t, nil, "ls", "--server", c.URL, "-o", "yaml").want(t, 0).stdout
	if !strings.Contains(yamlOut, "digest: "+appDigest) {
		t.Errorf("ls -o yaml:\n%s", yamlOut)
	}

	// Client traffic for stats: two hits (revalidateAfter trusts the pull's check).
	px.Reset()
	expect(t, manifest(t, c, http.MethodGet, "upstream.test/team/app", "v1"), http.StatusOK, "HIT", "manifest by tag")
	expect(t, call(t, http.MethodGet, c.URL+"/v2/upstream.test/team/app/blobs/"+m.Layers[0].Digest.String()), http.StatusOK, "HIT", "layer")
	if px.Total() != 0 {
		t.Fatalf("hits reached the upstream: %d requests", px.Total())
	}
	// The manifest request is one more use of the image; the layer request is not a use of its root.
	if before, after := images["upstream.test/team/app"].Uses, lsImages(t, c.URL)["upstream.test/team/app"].Uses; before < 1 || after != before+1 {
		t.Errorf("uses of team/app: %d after the pull, %d after one more manifest request; want at least 1, then one more", before, after)
	}

	// refresh: exactly one upstream HEAD despite revalidateAfter.
	var ref struct {
		Digest, Result string
		Changed        bool
	}
	cli(t, nil, "refresh", "--server", c.URL, "-o", "json", "upstream.test/team/app:v1").want(t, 0).json(t, &ref)
	if ref.Digest != appDigest || ref.Changed || ref.Result != "REVALIDATED" {
		t.Errorf("refresh: %+v", ref)
	}
	if heads, total := px.Count(http.MethodHead, faultproxy.KindManifest), px.Total(); heads != 1 || total != 1 {
		t.Errorf("refresh: %d manifest HEADs and %d upstream requests in all, want exactly 1 HEAD", heads, total)
	}

	var stats struct {
		Total struct {
			Hits, Misses, Revalidated, Stale, Errors int64
			BytesFromCache                           int64 `json:"bytesFromCache"`
		}
		HitRatio float64 `json:"hitRatio"`
		Storage  struct {
			UsedBytes, Objects, LimitBytes, PinnedBytes int64
		}
		Upstreams []struct {
			Name     string
			Requests int64
			Errors   int64
			Healthy  bool
		}
	}
	cli(t, nil, "stats", "--server", c.URL, "-o", "json").want(t, 0).json(t, &stats)
	rawManifest, _ := app.RawManifest()
	if s := stats.Total; s.Hits != 2 || s.Misses != 0 || s.Stale != 0 || s.Errors != 0 || s.BytesFromCache != int64(len(rawManifest))+m.Layers[0].Size || stats.HitRatio != 1 {
		t.Errorf("stats totals %+v (hit ratio %v), want the 2 hits served (%d bytes from the cache)", s, stats.HitRatio, int64(len(rawManifest))+m.Layers[0].Size)
	}
	if s := stats.Storage; s.UsedBytes != appBytes+otherBytes || s.Objects != 7 || s.LimitBytes != 0 || s.PinnedBytes != 0 {
		t.Errorf("stats storage %+v, want %d bytes in 7 objects", s, appBytes+otherBytes)
	}
	if len(stats.Upstreams) != 1 || stats.Upstreams[0].Name != "upstream.test" || !stats.Upstreams[0].Healthy || stats.Upstreams[0].Errors != 0 || stats.Upstreams[0].Requests == 0 {
		t.Errorf("stats upstreams %+v", stats.Upstreams)
	}
	table = cli(t, nil, "stats", "--server", c.URL).want(t, 0).stdout
	if !strings.Contains(table, "hit ratio 100.0%") || !strings.Contains(table, "upstream.test") {
		t.Errorf("stats table:\n%s", table)
	}

	// rm: gone from ls, and the next GET by digest goes to the upstream again.
	var purged struct {
		Digest  string
		Objects []string
		Bytes   int64
	}
	cli(t, nil, "rm", "--server", c.URL, "-o", "json", "upstream.test/team/app:v1").want(t, 0).json(t, &purged)
	if purged.Digest != appDigest || len(purged.Objects) != 4 || purged.Bytes != appBytes {
		t.Errorf("rm: %+v, want 4 objects, %d bytes", purged, appBytes)
	}
	if images := lsImages(t, c.URL); len(images) != 1 || images["upstream.test/team/other"].Digest != otherDigest {
		t.Errorf("after rm, ls lists %+v", images)
	}
	px.Reset()
	expect(t, manifest(t, c, http.MethodGet, "upstream.test/team/app", appDigest), http.StatusOK, "MISS", "manifest by digest after rm")
	if gets := px.Count(http.MethodGet, faultproxy.KindManifest); gets != 1 {
		t.Errorf("GET by digest after rm: %d upstream manifest GETs, want 1", gets)
	}
	cli(t, nil, "rm", "--server", c.URL, "upstream.test/team/app:v1").want(t, 1, "not cached").oneLineError(t)
}

// TestCLIBadInput: each mistake is one line that says what to do, a status scripts can tell apart, and
// nothing done.
func TestCLIBadInput(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	px := startProxy(t, reg.URL)
	pushImage(t, reg.Host, "team/pinned:v1", "oci", 1, 4096)
	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, default: true}
pins: [upstream.test/team/pinned:v1]
`, px.URL()))
	cli(t, nil, "pull", "--server", c.URL, "upstream.test/team/pinned:v1").want(t, 0)
	before := lsImages(t, c.URL)
	px.Reset()

	for _, args := range [][]string{
		{"ls", "--bogus"}, {"pull", "--server", c.URL, "--nope", "x:v1"}, {"rm"}, {"rm", "a:v1", "b:v1"}, {"stats", "extra"},
		{"ls", "--server", c.URL, "-o", "xml"}, {"bogus-command"},
	} {
		r := cli(t, nil, args...).want(t, 2)
		r.oneLineError(t)
	}
	cli(t, nil, "ls", "--bogus").want(t, 2, "unknown flag: --bogus", "--help")

	// References that do not parse: refused before anything is sent; with several, none is pulled.
	for _, args := range [][]string{
		{"pull", "--server", c.URL, "upstream.test/team/ok:v1", "upstream.test/Team/App:v1"},
		{"rm", "--server", c.URL, "upstream.test/team/app:bad tag"},
		{"refresh", "--server", c.URL, "upstream.test/team/app@sha256:short"},
	} {
		cli(t, nil, args...).want(t, 2, "is not an image reference").oneLineError(t)
	}
	if px.Total() != 0 {
		t.Errorf("bad references reached the upstream: %d requests", px.Total())
	}

	// A server that is not running.
	down := "http://" + freeAddr(t)
	cli(t, nil, "ls", "--server", down).want(t, 1, "cannot reach imagecache at "+down, "is it running?").oneLineError(t)
	cli(t, []string{"IMAGECACHE_SERVER=" + down}, "stats").want(t, 1, "cannot reach imagecache at "+down).oneLineError(t)

	// Pulls that fail: exit 1, and the others are still pulled.
	pushImage(t, reg.Host, "team/ok:v1", "oci", 1, 4096)
	r := cli(t, nil, "pull", "--server", c.URL, "upstream.test/team/missing:v1", "upstream.test/team/ok:v1", "other.example/team/app:v1").want(t, 1,
		"pull upstream.test/team/missing:v1", "pull other.example/team/app:v1: ", "not one of imagecache's upstreams", "2 of 3 images could not be pulled")
	if !strings.Contains(r.stdout, "pulled upstream.test/team/ok:v1") {
		t.Errorf("the good ref was not pulled:\n%s", r.stdout)
	}

	// Purge of something pinned: exit 1 naming the owner, nothing removed.
	cli(t, nil, "rm", "--server", c.URL, "upstream.test/team/pinned:v1").want(t, 1, "pinned by config", "pins:").oneLineError(t)
	after := lsImages(t, c.URL)
	if got, was := after["upstream.test/team/pinned"], before["upstream.test/team/pinned"]; got.Digest != was.Digest || got.Size != was.Size || !got.Pinned {
		t.Errorf("after a refused rm: %+v, was %+v", got, was)
	}

	// --help everywhere: examples and exit codes.
	for _, name := range []string{"pull", "ls", "rm", "stats", "refresh"} {
		out := cli(t, nil, name, "--help").want(t, 0).stdout
		for _, s := range []string{"Examples:", "Exit status", "--server", "--token", "-o, --output"} {
			if !strings.Contains(out, s) {
				t.Errorf("%s --help lacks %q:\n%s", name, s, out)
			}
		}
	}
}

// TestCLIAdminToken: a server with admin.token refuses requests without it; the CLI sends it.
func TestCLIAdminToken(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	pushImage(t, reg.Host, "team/app:v1", "oci", 1, 4096)
	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, default: true}
admin: {token: s3cret}
`, reg.URL))
	for _, path := range []string{"/api/v1/stats", "/api/v1/images", "/api/v1/pins", "/api/v1/sets"} {
		a := call(t, http.MethodGet, c.URL+path)
		if a.Status != http.StatusUnauthorized || !strings.Contains(string(a.Body), "Bearer") {
			t.Errorf("GET %s without the token: %d %s, want 401", path, a.Status, a.Body)
		}
		if a := call(t, http.MethodGet, c.URL+path, "Authorization", "Bearer wrong"); a.Status != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d, want 401", path, a.Status)
		}
	}
	if a := call(t, http.MethodGet, c.URL+"/api/v1/stats", "Authorization", "Bearer s3cret"); a.Status != http.StatusOK {
		t.Errorf("GET /api/v1/stats with the token: %d %s", a.Status, a.Body)
	}
	cli(t, nil, "ls", "--server", c.URL).want(t, 1, "--token").oneLineError(t)
	cli(t, nil, "pull", "--server", c.URL, "upstream.test/team/app:v1").want(t, 1, "--token")
	if images := lsImages(t, c.URL, "IMAGECACHE_TOKEN=s3cret"); len(images) != 0 {
		t.Errorf("a refused pull stored %+v", images)
	}
	cli(t, nil, "pull", "--server", c.URL, "--token", "s3cret", "upstream.test/team/app:v1").want(t, 0)
	var list []cliImage
	cli(t, nil, "ls", "--server", c.URL, "--token", "s3cret", "-o", "json").want(t, 0).json(t, &list)
	if len(list) != 1 || list[0].Name != "upstream.test/team/app" {
		t.Errorf("ls with the token: %+v", list)
	}
	cli(t, []string{"IMAGECACHE_TOKEN=s3cret"}, "stats", "--server", c.URL).want(t, 0)
	cli(t, nil, "gc", "--server", c.URL, "--dry-run").want(t, 1)
	cli(t, nil, "gc", "--server", c.URL, "--token", "s3cret", "--dry-run").want(t, 0)
	cli(t, nil, "verify", "--server", c.URL, "--token", "s3cret").want(t, 0)

	// A refused verify says so and nothing else: not first that the server is re-hashing its storage.
	r := cli(t, nil, "verify", "--server", c.URL).want(t, 1, "--token")
	r.oneLineError(t)
	if strings.Contains(r.stderr, "re-hashing") {
		t.Errorf("a verify the server refused was announced as running:\n%s", r.stderr)
	}
	// gc and verify take the server and the token from the environment, like the client commands.
	env := []string{"IMAGECACHE_SERVER=" + c.URL, "IMAGECACHE_TOKEN=s3cret"}
	cliIn(t, t.TempDir(), env, "verify").want(t, 0)
	cliIn(t, t.TempDir(), env, "gc", "--dry-run").want(t, 0)
}

// TestCLIUsageErrors: every command refuses a wrong command line the same way: exit status 2, one line
// that names the flag or argument, and nothing done (run in an empty directory that must stay empty:
// serve, gc and verify default to ./imagecache-data).
func TestCLIUsageErrors(t *testing.T) {
	commands := [][]string{
		{}, {"version"}, {"serve"}, {"fetch"}, {"node-config"}, {"ca"}, {"ca", "init"}, {"ca", "print"},
		{"pull"}, {"ls"}, {"rm"}, {"stats"}, {"refresh"}, {"gc"}, {"verify"},
	}
	// The table must cover every command the binary has, also those added after this test was written.
	listed := map[string]bool{}
	for _, c := range commands {
		listed[strings.Join(c, " ")] = true
	}
	for _, parent := range [][]string{{}, {"ca"}} {
		for _, name := range helpCommands(t, parent) {
			if path := strings.Join(append(slices.Clone(parent), name), " "); !listed[path] && name != "help" && name != "completion" {
				t.Errorf("imagecache %s is not in this test's table", path)
			}
		}
	}

	dir := t.TempDir()
	for _, c := range commands {
		r := cliIn(t, dir, nil, append(slices.Clone(c), "--bogus")...).want(t, 2, "unknown flag: --bogus", "--help")
		r.oneLineError(t)
	}
	for _, args := range [][]string{
		{"version", "extra"}, {"serve", "extra"}, {"fetch", "extra"}, {"node-config", "extra"}, {"ca", "extra"},
		{"ca", "init", "extra"}, {"gc", "extra"}, {"verify", "extra"},
	} {
		r := cliIn(t, dir, nil, args...).want(t, 2, `"extra"`)
		r.oneLineError(t)
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"fetch", "--timeout", "soon"}, "--timeout"},
		{[]string{"serve", "--config"}, "--config"},
		{[]string{"gc", "-o", "xml"}, `-o "xml"`},
		{[]string{"verify", "-o", "xml"}, `-o "xml"`},
		{[]string{"verify", "--server", "http://127.0.0.1:1", "--storage", "x"}, "give one of them"},
		{[]string{"gc", "--server", "http://127.0.0.1:1", "--max-size", "1Gi"}, "--max-size"},
	} {
		r := cliIn(t, dir, nil, tc.args...).want(t, 2, tc.says)
		r.oneLineError(t)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("refused command lines left %v in the working directory", ents)
	}
}

// helpCommands lists the commands `imagecache PARENT --help` offers.
func helpCommands(t *testing.T, parent []string) []string {
	t.Helper()
	out := cli(t, nil, append(slices.Clone(parent), "--help")...).want(t, 0).stdout
	_, list, ok := strings.Cut(out, "Available Commands:\n")
	if !ok {
		t.Fatalf("imagecache %s --help lists no commands:\n%s", strings.Join(parent, " "), out)
	}
	list, _, _ = strings.Cut(list, "\n\n")
	var names []string
	for _, line := range strings.Split(list, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

// TestCLIMaintenanceServerFromEnv: gc and verify go to $IMAGECACHE_SERVER, as the client commands do,
// unless a flag names a server or a storage. Each runs in an empty directory, where the default storage
// ./imagecache-data is not: reporting on that would be a misleading "clean".
func TestCLIMaintenanceServerFromEnv(t *testing.T) {
	reg := startRegistry(t, registryOpts{})
	_, img := pushImage(t, reg.Host, "team/app:v1", "oci", 2, 16<<10)
	c := startImagecache(t, fmt.Sprintf(`upstreams:
  - {name: upstream.test, url: %q, default: true}
`, reg.URL))
	cli(t, nil, "pull", "--server", c.URL, "team/app:v1").want(t, 0)
	stored := imageBytes(t, img)
	env := []string{"IMAGECACHE_SERVER=" + c.URL}

	dir := t.TempDir()
	var rep struct{ Checked, Corrupt, Missing int }
	cliIn(t, dir, env, "verify", "-o", "json").want(t, 0).json(t, &rep)
	if rep.Checked != 4 || rep.Corrupt != 0 || rep.Missing != 0 {
		t.Errorf("verify with IMAGECACHE_SERVER: %+v, want the server's 4 objects checked", rep)
	}
	var plan struct {
		Before int64
		DryRun bool
	}
	cliIn(t, dir, env, "gc", "--dry-run", "-o", "json").want(t, 0).json(t, &plan)
	if plan.Before != stored || !plan.DryRun {
		t.Errorf("gc with IMAGECACHE_SERVER: %+v, want the server's %d bytes, dry run", plan, stored)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("gc or verify opened a storage in the working directory: %v", ents)
	}

	// --server wins over the environment.
	down := []string{"IMAGECACHE_SERVER=http://" + freeAddr(t)}
	cliIn(t, dir, down, "verify", "--server", c.URL, "-o", "json").want(t, 0).json(t, &rep)
	if rep.Checked != 4 {
		t.Errorf("verify --server with another IMAGECACHE_SERVER: %+v", rep)
	}
	// A storage named on the command line wins over the environment.
	missing := filepath.Join(dir, "no-store")
	cliIn(t, dir, env, "verify", "--storage", missing).want(t, 1, "no imagecache storage at "+missing).oneLineError(t)
	fresh := filepath.Join(dir, "fresh")
	cliIn(t, dir, env, "gc", "--storage", fresh, "--max-size", "1Gi", "--dry-run", "-o", "json").want(t, 0).json(t, &plan)
	if plan.Before != 0 {
		t.Errorf("gc --storage %s with IMAGECACHE_SERVER set: %+v, want the empty storage's plan", fresh, plan)
	}
	// --max-size means a storage opened directly: with the server from the environment it is refused.
	cliIn(t, dir, env, "gc", "--max-size", "1Gi").want(t, 2, "--max-size", "IMAGECACHE_SERVER").oneLineError(t)

	for _, name := range []string{"gc", "verify"} {
		out := cli(t, nil, name, "--help").want(t, 0).stdout
		for _, s := range []string{"IMAGECACHE_SERVER", "--storage", "--token", "Exit status"} {
			if !strings.Contains(out, s) {
				t.Errorf("%s --help lacks %q:\n%s", name, s, out)
			}
		}
	}
}
