package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	sigsyaml "sigs.k8s.io/yaml"

	"imagecache.io/imagecache/api/v1alpha1"
)

// cluster is a real kube-apiserver and etcd (envtest, built by hack/envtest-assets.sh) with the CRDs.
type cluster struct {
	client     client.Client
	kubeconfig string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	assets := filepath.Join(repoRoot(), "bin", "envtest")
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		t.Fatalf("%s/kube-apiserver is missing: run hack/envtest-assets.sh (hack/test.sh does)", assets)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, ErrorIfCRDPathMissing: true,
		CRDDirectoryPaths: []string{filepath.Join(repoRoot(), "deploy", "crds")}}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() { env.Stop() })
	scheme := runtime.NewScheme()
	clientgoscheme.AddToScheme(scheme)
	v1alpha1.AddToScheme(scheme)
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// The cache runs as a user with exactly the rights deploy/ grants its ServiceAccount: a controller that
	// needs more fails here, not first in someone's cluster.
	const user = "imagecache-under-test"
	grantDeployRBAC(t, admin, user)
	u, err := env.AddUser(envtest.User{Name: user}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(path, kc, 0o600)
	return &cluster{client: admin, kubeconfig: path}
}

// grantDeployRBAC creates deploy/'s ClusterRole and (in namespace default, where the cache's lease goes
// without POD_NAMESPACE) its leader-election Role, bound to user instead of the ServiceAccount.
func grantDeployRBAC(t *testing.T, c client.Client, user string) {
	t.Helper()
	ctx := context.Background()
	for _, file := range []string{"rbac.yaml", "leader-election-rbac.yaml"} {
		raw, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(raw), "\n---") {
			var obj unstructured.Unstructured
			if err := sigsyaml.Unmarshal([]byte(doc), &obj.Object); err != nil || obj.Object == nil {
				continue
			}
			switch obj.GetKind() {
			case "Role", "RoleBinding":
				obj.SetNamespace("default")
			}
			if strings.HasSuffix(obj.GetKind(), "Binding") {
				obj.Object["subjects"] = []any{map[string]any{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}}
			}
			if err := c.Create(ctx, &obj); err != nil {
				t.Fatalf("create %s %s from deploy/%s: %v", obj.GetKind(), obj.GetName(), file, err)
			}
		}
	}
}

// startCacheInCluster runs imagecache serve with the controllers on.
func (k *cluster) startCache(t *testing.T, configYAML string) *cacheProc {
	t.Helper()
	c := startImagecacheWith(t, configYAML, "--kubeconfig", k.kubeconfig, "--leader-elect=true")
	return c
}

func condition(conds []metav1.Condition, typ string) *metav1.Condition {
	return meta.FindStatusCondition(conds, typ)
}

// waitImageCache polls the resource until ok says so.
func waitImageCache(t *testing.T, k *cluster, key types.NamespacedName, what string, ok func(*v1alpha1.ImageCache) error) *v1alpha1.ImageCache {
	t.Helper()
	var ic v1alpha1.ImageCache
	waitFor(t, 60*time.Second, what, func() error {
		if err := k.client.Get(context.Background(), key, &ic); err != nil {
			return err
		}
		return ok(&ic)
	})
	return &ic
}

func readyIs(conds []metav1.Condition, want metav1.ConditionStatus, gen int64) error {
	c := condition(conds, v1alpha1.ConditionReady)
	if c == nil || c.Status != want || c.ObservedGeneration != gen {
		return fmt.Errorf("Ready condition %+v, want %s for generation %d", c, want, gen)
	}
	return nil
}

type pinList struct {
	Pins []struct{ Owner, Reference string } `json:"pins"`
}

func pinsOf(t *testing.T, c *cacheProc, owner string) []string {
	t.Helper()
	a := call(t, http.MethodGet, c.URL+"/api/v1/pins")
	var pl pinList
	if err := json.Unmarshal(a.Body, &pl); err != nil {
		t.Fatalf("/api/v1/pins: %v %s", err, a.Body)
	}
	var out []string
	for _, p := range pl.Pins {
		if p.Owner == owner {
			out = append(out, p.Reference)
		}
	}
	return out
}

func TestImageCacheResource(t *testing.T) {
	k := startCluster(t)
	reg := startRegistry(t, registryOpts{})
	single, _ := pushImage(t, reg.Host, "team/app:v1", "oci", 2, 4096)
	idx, _ := pushIndex(t, reg.Host, "team/multi:v1")
	files := startFileServer(t)
	ipa := newIPATarball(t)
	files.Set("/ipa.tar.gz", ipa.Tgz, time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	c := k.startCache(t, fmt.Sprintf("upstreams:\n  - {name: upstream.test, url: %q, aliases: [%q]}\n", reg.URL, reg.Host))
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "default", Name: "platform"}
	ic := &v1alpha1.ImageCache{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}, Spec: v1alpha1.ImageCacheSpec{
		Images: []v1alpha1.ImageSpec{
			{Ref: "upstream.test/team/app:v1"},
			{Ref: reg.Host + "/team/multi:v1", Platforms: []string{"linux/arm64"}, PullPolicy: "IfNotPresent"},
		},
		Files: []v1alpha1.FileSetSpec{{Name: "ipa", URL: files.URL + "/ipa.tar.gz",
			Extract: []v1alpha1.ExtractRule{{From: "*.kernel", To: "agent.kernel"}, {From: "*.initramfs", To: "agent.initramfs"}}}},
	}}
	if err := k.client.Create(ctx, ic); err != nil {
		t.Fatal(err)
	}
	got := waitImageCache(t, k, key, "ImageCache Ready", func(ic *v1alpha1.ImageCache) error {
		return readyIs(ic.Status.Conditions, metav1.ConditionTrue, ic.Generation)
	})
	if got.Status.Images[0].Digest != single || got.Status.Images[1].Digest != idx || got.Status.Images[0].State != v1alpha1.StateCached {
		t.Fatalf("image status %+v, want digests %s and %s", got.Status.Images, single, idx)
	}
	if got.Status.CachedImages != "2/2" || got.Status.Size == "" {
		t.Fatalf("summary %q %q", got.Status.CachedImages, got.Status.Size)
	}
	if d := condition(got.Status.Conditions, v1alpha1.ConditionDegraded); d == nil || d.Status != metav1.ConditionFalse {
		t.Fatalf("Degraded %+v, want False", d)
	}
	if !slices.Contains(got.Finalizers, "imagecache.io/release-pins") {
		t.Fatalf("finalizers %v", got.Finalizers)
	}
	fs := got.Status.Files[0]
	if fs.State != v1alpha1.StateCached || len(fs.Files) != 2 {
		t.Fatalf("file set status %+v", fs)
	}
	for _, f := range fs.Files {
		want := ipa.Kernel
		if f.Name == "agent.initramfs" {
			want = ipa.Initramfs
		}
		if a := call(t, http.MethodGet, f.URL); a.Status != 200 || !bytes.Equal(a.Body, want) {
			t.Fatalf("GET %s: %d, %d bytes", f.URL, a.Status, len(a.Body))
		}
	}
	var events corev1.EventList
	waitFor(t, 10*time.Second, "a Fetched event", func() error {
		k.client.List(ctx, &events, client.InNamespace("default"))
		for _, e := range events.Items {
			if e.InvolvedObject.Name == key.Name && e.Reason == "Fetched" && strings.Contains(e.Message, single) {
				return nil
			}
		}
		return fmt.Errorf("no Fetched event for %s among %d events", single, len(events.Items))
	})
	owner := "k8s/ImageCache/default/platform"
	pins := strings.Join(pinsOf(t, c, owner), " ")
	for _, want := range []string{"upstream.test/team/app:v1", "upstream.test/team/multi:v1", "files/default_platform_ipa"} {
		if !strings.Contains(pins, want) {
			t.Fatalf("pins %q lack %s", pins, want)
		}
	}
	// Everything pinned is pullable with the upstream gone.
	reg.Stop(t)
	pullImage(t, c.Host, "upstream.test/team/app:v1", single, "application/vnd.oci.image.manifest.v1+json")

	// A bad reference: Degraded with a message, the rest still served.
	reg.Start(t)
	k.client.Get(ctx, key, ic)
	ic.Spec.Images = append(ic.Spec.Images, v1alpha1.ImageSpec{Ref: "quay.io/nobody/nothing:v1"})
	if err := k.client.Update(ctx, ic); err != nil {
		t.Fatal(err)
	}
	waitImageCache(t, k, key, "Degraded after a bad ref", func(ic *v1alpha1.ImageCache) error {
		d := condition(ic.Status.Conditions, v1alpha1.ConditionDegraded)
		if d == nil || d.Status != metav1.ConditionTrue || !strings.Contains(d.Message, "quay.io") || d.ObservedGeneration != ic.Generation {
			return fmt.Errorf("Degraded %+v", d)
		}
		if err := readyIs(ic.Status.Conditions, metav1.ConditionFalse, ic.Generation); err != nil {
			return err
		}
		return nil
	})

	// Deleting it releases the pins (the finalizer waits for that) and stops serving its files.
	if err := k.client.Delete(ctx, ic); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the resource is gone", func() error {
		if err := k.client.Get(ctx, key, &v1alpha1.ImageCache{}); err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
	waitFor(t, 10*time.Second, "pins released", func() error {
		if p := pinsOf(t, c, owner); len(p) != 0 {
			return fmt.Errorf("pins left: %v", p)
		}
		return nil
	})
	if a := call(t, http.MethodGet, fs.Files[0].URL); a.Status != 404 {
		t.Fatalf("a deleted resource's file is still served: %d", a.Status)
	}
}

func TestImageCacheAdmissionRejectsBadSpecs(t *testing.T) {
	k := startCluster(t)
	ctx := context.Background()
	image := func(ref string) map[string]any { return map[string]any{"images": []any{map[string]any{"ref": ref}}} }
	every := func(d string) map[string]any {
		return map[string]any{"images": []any{map[string]any{"ref": "nginx:1.27"}}, "refreshInterval": d}
	}
	imageCache := func(name string, spec map[string]any) *unstructured.Unstructured {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "imagecache.io/v1alpha1", "kind": "ImageCache",
			"metadata": map[string]any{"name": name, "namespace": "default"}}}
		if spec != nil {
			obj.Object["spec"] = spec
		}
		return obj
	}
	for name, spec := range map[string]map[string]any{
		"no-spec":          nil,
		"empty":            {},
		"uppercase-ref":    image("Bad/Ref:v1"),
		"bangs-in-ref":     image("registry.example.com/team/app!!:v1"),
		"short-digest":     image("registry.example.com/team/app@sha256:1234"),
		"uppercase-digest": image("nginx@sha256:" + strings.Repeat("A", 64)),
		"bad-policy":       {"images": []any{map[string]any{"ref": "nginx:1.27", "pullPolicy": "Sometimes"}}},
		"ftp-files":        {"files": []any{map[string]any{"name": "x", "url": "ftp://example.com/x"}}},
		"unknown-field":    {"images": []any{map[string]any{"ref": "nginx:1.27", "pullPolicyy": "Always"}}},
		"refresh-10ms":     every("10ms"),
		"refresh-0s":       every("0s"),
		"refresh-negative": every("-5m"),
		"refresh-garbage":  every("soon"),
	} {
		if err := k.client.Create(ctx, imageCache(name, spec), client.FieldValidation("Strict")); err == nil {
			t.Errorf("%s: accepted %v", name, spec)
		}
	}
	// The rules must not refuse what is valid.
	for name, spec := range map[string]map[string]any{
		"short-name":      image("nginx:1.27"),
		"host-port-tag":   image("127.0.0.1:5000/team/app:v1.2_3-rc"),
		"digest":          image("registry.example.com/team/app@sha256:" + strings.Repeat("ab", 32)),
		"separators":      image("quay.io/my_org/my-app__x.y/sub:latest"),
		"refresh-10s":     every("10s"),
		"refresh-1h30m":   every("1h30m"),
		"refresh-decimal": every("1.5h"),
	} {
		if err := k.client.Create(ctx, imageCache(name, spec), client.FieldValidation("Strict"), client.DryRunAll); err != nil {
			t.Errorf("%s: refused %v: %v", name, spec, err)
		}
	}
}

func TestPullSecretReachesTheRegistry(t *testing.T) {
	k := startCluster(t)
	reg := startRegistry(t, registryOpts{auth: true})
	creds := remote.WithAuth(&authn.Basic{Username: registryUser, Password: registryPassword})
	d, _ := pushImage(t, reg.Host, "private/app:v1", "oci", 1, 2048, creds)
	// An oci:// file set on the same registry needs the same secret.
	agent := newIPAArtifact(t)
	if err := remote.Write(parseRef(t, reg.Host, "private/ipa:v1"), agent.image(t, ""), creds, remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
	startFor := k.startCache(t, fmt.Sprintf("upstreams:\n  - {name: private.test, url: %q}\n", reg.URL))
	_ = startFor
	ctx := context.Background()
	auth := base64.StdEncoding.EncodeToString([]byte(registryUser + ":" + registryPassword))
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: "default"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"` + reg.Host + `":{"auth":"` + auth + `"}}}`)}}
	malformed := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "broken", Namespace: "default"}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"x": []byte("y")}}
	for _, s := range []*corev1.Secret{secret, malformed} {
		if err := k.client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	with := &v1alpha1.ImageCache{ObjectMeta: metav1.ObjectMeta{Name: "with", Namespace: "default"}, Spec: v1alpha1.ImageCacheSpec{
		Images: []v1alpha1.ImageSpec{{Ref: "private.test/private/app:v1"}}, PullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}},
		Files: []v1alpha1.FileSetSpec{{Name: "agent", URL: "oci://private.test/private/ipa:v1"}}}}
	without := &v1alpha1.ImageCache{ObjectMeta: metav1.ObjectMeta{Name: "without", Namespace: "default"}, Spec: v1alpha1.ImageCacheSpec{
		Images: []v1alpha1.ImageSpec{{Ref: "private.test/private/app:v1"}}, PullSecrets: []corev1.LocalObjectReference{{Name: "broken"}, {Name: "missing"}}}}
	for _, ic := range []*v1alpha1.ImageCache{with, without} {
		if err := k.client.Create(ctx, ic); err != nil {
			t.Fatal(err)
		}
	}
	got := waitImageCache(t, k, client.ObjectKeyFromObject(with), "cached with the pull secret", func(ic *v1alpha1.ImageCache) error {
		return readyIs(ic.Status.Conditions, metav1.ConditionTrue, ic.Generation)
	})
	if got.Status.Images[0].Digest != d {
		t.Fatalf("digest %s, want %s", got.Status.Images[0].Digest, d)
	}
	if len(got.Status.Files) != 1 || len(got.Status.Files[0].Files) != 2 {
		t.Fatalf("oci:// file set with the pull secret: %+v", got.Status.Files)
	}
	for _, f := range got.Status.Files[0].Files {
		want := map[string][]byte{kernelFile: agent.Kernel, initramfsFile: agent.Initramfs}[f.Name]
		if a := call(t, http.MethodGet, f.URL); a.Status != http.StatusOK || !bytes.Equal(a.Body, want) {
			t.Errorf("GET %s: %d, %d bytes; want the artifact's %s", f.URL, a.Status, len(a.Body), f.Name)
		}
	}
	waitImageCache(t, k, client.ObjectKeyFromObject(without), "Degraded without usable credentials", func(ic *v1alpha1.ImageCache) error {
		deg := condition(ic.Status.Conditions, v1alpha1.ConditionDegraded)
		if deg == nil || deg.Status != metav1.ConditionTrue {
			return fmt.Errorf("Degraded %+v", deg)
		}
		for _, want := range []string{"broken", "missing"} {
			if !strings.Contains(deg.Message, want) {
				return fmt.Errorf("Degraded message %q does not name the %s secret", deg.Message, want)
			}
		}
		return nil
	})
	for _, name := range []string{"default/broken", "default/missing"} {
		waitEvent(t, k, "without", corev1.EventTypeWarning, "PullSecret", name)
	}
}
