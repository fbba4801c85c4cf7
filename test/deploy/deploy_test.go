// Package deploy tests the Kubernetes deployment artifacts: the kustomize base in deploy/ with its proxy
// component, and the Helm chart in charts/imagecache. Both are rendered by the real kustomize and helm and
// applied with server-side dry-run to a real kube-apiserver (envtest), so a field the API does not know, a
// wrong type or a missing required field fails here and not in a user's cluster; then the rendered objects
// are checked for what the API cannot know (hardening, probes, wiring between objects, the config file
// parsing as imagecache parses it).
package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/proxy"
)

const namespace = "imagecache"

func TestDeployArtifacts(t *testing.T) {
	root := repoRoot(t)
	helm, kustomize := filepath.Join(root, "bin", "helm"), filepath.Join(root, "bin", "kustomize")
	for _, tool := range []string{helm, kustomize} {
		if _, err := os.Stat(tool); err != nil {
			t.Fatalf("%s is missing: run hack/test-tools.sh to build it (%v)", tool, err)
		}
	}
	c, kubeconfig := startAPIServer(t, root)
	ctx := t.Context()

	// Namespaced dry-runs are refused in a namespace that does not exist, and a dry-run of the Namespace
	// creates nothing, so it is created for real first.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("create namespace %s: %v", namespace, err)
	}

	t.Run("DryRunCatchesSchemaErrors", func(t *testing.T) {
		// The checks below mean something only if a wrong field is refused, not silently dropped.
		bad := decodeAll(t, "bad.yaml", []byte(`
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: bad, namespace: imagecache}
spec:
  replica: 1
  selector: {matchLabels: {app: bad}}
  template:
    metadata: {labels: {app: bad}}
    spec: {containers: [{name: c, image: x}]}
`))
		err := dryRunApply(ctx, c, bad[0])
		if err == nil || !strings.Contains(err.Error(), "replica") {
			t.Fatalf("a StatefulSet with the unknown field spec.replica: err = %v, want it refused; the dry-run checks nothing", err)
		}
		t.Logf("refused as it should be: %v", err)
	})

	var kustomized, helmDefault []*unstructured.Unstructured
	t.Run("Kustomize", func(t *testing.T) {
		kustomized = kustomizeBuild(t, kustomize, filepath.Join(root, "deploy"))
		applyAll(t, c, kustomized)
		checkObjects(t, kustomized, "imagecache")
	})

	t.Run("KustomizeProxyComponent", func(t *testing.T) {
		// The component's secretGenerator reads ca.crt and ca.key next to it: build from a copy, so the test
		// never writes a CA into the repository.
		dir := t.TempDir()
		if err := os.CopyFS(filepath.Join(dir, "deploy"), os.DirFS(filepath.Join(root, "deploy"))); err != nil {
			t.Fatal(err)
		}
		certPEM, keyPEM, err := proxy.NewCA(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		component := filepath.Join(dir, "deploy", "components", "proxy")
		writeFile(t, filepath.Join(component, "ca.crt"), certPEM)
		writeFile(t, filepath.Join(component, "ca.key"), keyPEM)
		// The overlay deploy/README.md tells users to write.
		writeFile(t, filepath.Join(dir, "kustomization.yaml"), []byte(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [deploy]
components: [deploy/components/proxy]
`))
		objs := kustomizeBuild(t, kustomize, dir)
		applyAll(t, c, objs)
		sts := statefulSet(t, objs)
		secret := checkCASecret(t, objs, "imagecache-proxy-ca-")
		if secret.Namespace != sts.Namespace || !bytes.Equal(secret.Data["ca.crt"], certPEM) {
			t.Errorf("Secret %s/%s: want it in the pod's namespace %s, with the ca.crt next to the component", secret.Namespace, secret.Name, sts.Namespace)
		}
		checkProxy(t, objs, proxyFromArgs(t, sts), secret.Name)
	})

	t.Run("Helm", func(t *testing.T) {
		chart := filepath.Join(root, "charts", "imagecache")
		out := runHelm(t, helm, "lint", chart)
		if strings.Contains(out, "[WARNING]") || strings.Contains(out, "[ERROR]") {
			t.Errorf("helm lint %s is not clean:\n%s", chart, out)
		}
		helmDefault = helmTemplate(t, helm, chart)
		applyAll(t, c, helmDefault)
		checkObjects(t, helmDefault, "test-imagecache")

		sized := helmTemplate(t, helm, chart, "--set", "replicaCount=2", "--set", "persistence.size=10Gi")
		applyAll(t, c, sized)
		sts := statefulSet(t, sized)
		if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 2 {
			t.Errorf("--set replicaCount=2: StatefulSet replicas = %v, want 2", sts.Spec.Replicas)
		}
		if got := claimSize(t, sts); got.Cmp(resource.MustParse("10Gi")) != 0 {
			t.Errorf("--set persistence.size=10Gi: volume claim requests %s, want 10Gi", got.String())
		}

		// Status URLs name the Service the chart made, on its port, whatever the listen port; or publicURL.
		for _, tc := range []struct {
			args []string
			want string
		}{
			{nil, "http://test-imagecache." + namespace + ".svc:5000"},
			{[]string{"--set", "service.port=8080", "--set", "config.listen=0.0.0.0:6000"}, "http://test-imagecache." + namespace + ".svc:8080"},
			{[]string{"--set", "fullnameOverride=cache"}, "http://cache." + namespace + ".svc:5000"},
			{[]string{"--set", "publicURL=https://cache.example.com"}, "https://cache.example.com"},
		} {
			objs := helmTemplate(t, helm, chart, tc.args...)
			args := statefulSet(t, objs).Spec.Template.Spec.Containers[0].Args
			i := slices.Index(args, "--public-url")
			if i < 0 || i+1 >= len(args) || args[i+1] != tc.want {
				t.Errorf("helm template %v: args %q, want --public-url %s", tc.args, args, tc.want)
			}
			if svc := service(t, objs); !strings.HasPrefix(tc.want, "https://cache.example") && !strings.Contains(tc.want, "//"+svc.GetName()+".") {
				t.Errorf("helm template %v: the Service is %s, but status URLs name %s", tc.args, svc.GetName(), tc.want)
			}
		}

		// Every optional branch of the templates must render to objects the API accepts too.
		optional := helmTemplate(t, helm, chart, "--set", strings.Join([]string{
			"serviceAccount.create=false", "serviceAccount.name=cache", "rbac.create=false",
			"podDisruptionBudget.enabled=false", "persistence.storageClass=fast", "service.type=NodePort",
			"nodeSelector.disk=ssd", "tolerations[0].key=dedicated", "tolerations[0].operator=Exists",
			"affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
			"affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.topologyKey=kubernetes.io/hostname",
			"imagePullSecrets[0].name=pull", "image.tag=v9.9.9",
			"config.proxy.listen=0.0.0.0:3128", "proxy.caSecret=imagecache-proxy-ca",
		}, ","))
		applyAll(t, c, optional)
		for _, o := range optional {
			// A Secret too: with proxy.caSecret the chart mounts the user's CA and makes none.
			if k := o.GetKind(); strings.Contains(k, "Role") || k == "ServiceAccount" || k == "PodDisruptionBudget" || k == "Secret" {
				t.Errorf("%s rendered although it is turned off", describe(o))
			}
		}
		if img := statefulSet(t, optional).Spec.Template.Spec.Containers[0].Image; img != "ghcr.io/imagecache/imagecache:v9.9.9" {
			t.Errorf("--set image.tag=v9.9.9: image %q", img)
		}
		checkProxy(t, optional, proxyFromConfig(t, optional), "imagecache-proxy-ca")

		// Without proxy.caSecret the chart makes the CA itself (proxy.createCA defaults to true).
		createdCA := helmTemplate(t, helm, chart, "--set", "config.proxy.listen=0.0.0.0:3128")
		applyAll(t, c, createdCA)
		secret := checkCASecret(t, createdCA, "test-imagecache-proxy-ca")
		if secret.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Errorf("%s: annotations %v; want helm.sh/resource-policy: keep, clients trust this CA", secret.Name, secret.Annotations)
		}
		checkProxy(t, createdCA, proxyFromConfig(t, createdCA), secret.Name)

		// An upgrade keeps the CA in the cluster, which clients already trust: helm's lookup sees the Secret
		// when it renders against the API server (--dry-run=server), as helm upgrade does.
		certPEM, keyPEM, err := proxy.NewCA(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		installed := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret.Name, Namespace: namespace},
			Data: map[string][]byte{"ca.crt": certPEM, "ca.key": keyPEM}}
		if err := c.Create(ctx, installed); err != nil {
			t.Fatalf("create Secret %s: %v", secret.Name, err)
		}
		upgraded := helmTemplate(t, helm, chart, "--set", "config.proxy.listen=0.0.0.0:3128", "--dry-run=server", "--kubeconfig", kubeconfig)
		if kept := checkCASecret(t, upgraded, secret.Name); !maps.EqualFunc(kept.Data, installed.Data, bytes.Equal) {
			t.Error("proxy.createCA with the Secret already in the cluster: rendered a new CA instead of keeping the one clients trust")
		}

		// The admin token comes from a Secret mounted as a file, never from the ConfigMap.
		withToken := helmTemplate(t, helm, chart, "--set", "admin.tokenSecret=imagecache-admin")
		applyAll(t, c, withToken)
		if cfg := configYAML(t, withToken); !strings.Contains(cfg, "tokenFile: /etc/imagecache-admin/token") {
			t.Errorf("admin.tokenSecret: config.yaml does not point admin.tokenFile at the mounted Secret:\n%s", cfg)
		}
		tokenMounted := false
		for _, m := range statefulSet(t, withToken).Spec.Template.Spec.Containers[0].VolumeMounts {
			tokenMounted = tokenMounted || (m.Name == "admin-token" && m.MountPath == "/etc/imagecache-admin" && m.ReadOnly)
		}
		if !tokenMounted {
			t.Error("admin.tokenSecret: the Secret is not mounted read-only at /etc/imagecache-admin")
		}
		if _, err := helmRender(t, helm, chart, "--set", "config.proxy.listen=0.0.0.0:3128,proxy.createCA=false"); err == nil || !strings.Contains(err.Error(), "imagecache ca init") {
			t.Errorf("config.proxy with proxy.createCA=false and no proxy.caSecret: %v; want a refusal that says how to make the CA", err)
		}
		if _, err := helmRender(t, helm, chart, "--set", "admin.tokenSecret=imagecache-admin", "--set", "config.admin.token=inline"); err == nil ||
			!strings.Contains(err.Error(), "keep one") {
			t.Errorf("admin.tokenSecret with config.admin.token: %v; want a refusal, not one of them silently ignored", err)
		}
		if _, err := helmRender(t, helm, chart, "--set", "config.listen=127.0.0.1:5000"); err == nil {
			t.Error("a loopback config.listen rendered; the probes and the Service could never reach it")
		}
	})

	t.Run("SameDefaults", func(t *testing.T) {
		if kustomized == nil || helmDefault == nil {
			t.Skip("a rendering failed above")
		}
		// The chart's values.yaml default config is documented as the kustomize ConfigMap's.
		k, h := configYAML(t, kustomized), configYAML(t, helmDefault)
		var km, hm map[string]any
		if err := yaml.Unmarshal([]byte(k), &km); err != nil {
			t.Fatalf("kustomize config.yaml: %v", err)
		}
		if err := yaml.Unmarshal([]byte(h), &hm); err != nil {
			t.Fatalf("helm config.yaml: %v", err)
		}
		if !reflect.DeepEqual(km, hm) {
			t.Errorf("the chart's default config differs from deploy/configmap.yaml:\nkustomize: %v\nhelm:      %v", km, hm)
		}
		ks, hs := statefulSet(t, kustomized), statefulSet(t, helmDefault)
		if a, b := claimSize(t, ks), claimSize(t, hs); a.Cmp(b) != 0 {
			t.Errorf("volume size: kustomize %s, helm %s", a.String(), b.String())
		}
		if a, b := ks.Spec.Template.Spec.Containers[0].Resources, hs.Spec.Template.Spec.Containers[0].Resources; !reflect.DeepEqual(a, b) {
			t.Errorf("resources: kustomize %v, helm %v", a, b)
		}
	})

	t.Run("ChartCRDsMatchDeployCRDs", func(t *testing.T) {
		// Helm can only install CRDs from inside the chart, so charts/imagecache/crds holds copies of the
		// generated ones; this keeps them from drifting.
		want, err := filepath.Glob(filepath.Join(root, "deploy", "crds", "*_*.yaml"))
		if err != nil || len(want) == 0 {
			t.Fatalf("no generated CRDs in deploy/crds (%v)", err)
		}
		got, _ := filepath.Glob(filepath.Join(root, "charts", "imagecache", "crds", "*.yaml"))
		names := func(paths []string) (out []string) {
			for _, p := range paths {
				out = append(out, filepath.Base(p))
			}
			return out
		}
		if !slices.Equal(names(want), names(got)) {
			t.Errorf("charts/imagecache/crds has %v, deploy/crds has %v", names(got), names(want))
		}
		for _, p := range want {
			a, b := readFile(t, p), readFile(t, filepath.Join(root, "charts", "imagecache", "crds", filepath.Base(p)))
			if !bytes.Equal(a, b) {
				t.Errorf("charts/imagecache/crds/%s differs from deploy/crds: cp deploy/crds/imagecache.io_*.yaml charts/imagecache/crds/", filepath.Base(p))
			}
		}
	})
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root %s: %v", root, err)
	}
	return root
}

// startAPIServer runs etcd and kube-apiserver with the generated CRDs installed. kubeconfig is a file for
// the tools that talk to it (helm's lookup).
func startAPIServer(t *testing.T, root string) (c client.Client, kubeconfig string) {
	t.Helper()
	assets := filepath.Join(root, "bin", "envtest")
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			t.Fatalf("%s is missing: run hack/envtest-assets.sh to build the envtest binaries (%v)", filepath.Join(assets, bin), err)
		}
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(root, "deploy", "crds")},
		ErrorIfCRDPathMissing: true,
	}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest (kube-apiserver and etcd from %s): %v", assets, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop envtest: %v", err)
		}
	})
	t.Logf("kube-apiserver and etcd up in %s", time.Since(start).Round(time.Millisecond))
	c, err = client.New(cfg, client.Options{})
	if err != nil {
		t.Fatalf("client for envtest: %v", err)
	}
	admin, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatalf("envtest user: %v", err)
	}
	kc, err := admin.KubeConfig()
	if err != nil {
		t.Fatalf("envtest kubeconfig: %v", err)
	}
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	writeFile(t, kubeconfig, kc)
	return c, kubeconfig
}

// kustomizeBuild renders dir as `kubectl apply -k` would.
func kustomizeBuild(t *testing.T, kustomize, dir string) []*unstructured.Unstructured {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), kustomize, "build", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr.Bytes())
	}
	objs := decodeAll(t, "kustomize build "+dir, out)
	if len(objs) == 0 {
		t.Fatalf("kustomize build %s renders no objects", dir)
	}
	return objs
}

// decodeAll splits a multi-document YAML file into objects, skipping empty documents (helm template
// separates files with documents holding only a "# Source:" comment).
func decodeAll(t *testing.T, source string, data []byte) []*unstructured.Unstructured {
	t.Helper()
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("%s: split YAML documents: %v", source, err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("%s: %v", source, err)
		}
		if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(js); err != nil {
			t.Fatalf("%s: decode object: %v\n%s", source, err, doc)
		}
		objs = append(objs, o)
	}
}

// dryRunApply is `kubectl apply --server-side --dry-run=server --validate=strict`: the API server runs
// schema validation, defaulting and admission, and stores nothing.
func dryRunApply(ctx context.Context, c client.Client, o *unstructured.Unstructured) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.Patch(ctx, o.DeepCopy(), client.Apply, client.FieldOwner("test"), client.ForceOwnership,
		client.DryRunAll, client.FieldValidation(metav1.FieldValidationStrict))
}

func applyAll(t *testing.T, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	applied := 0
	for _, o := range objs {
		if err := dryRunApply(t.Context(), c, o); err != nil {
			t.Errorf("server-side dry-run apply of %s: %v", describe(o), err)
			continue
		}
		applied++
	}
	t.Logf("applied %d of %d objects (server-side, dry-run)", applied, len(objs))
}

func describe(o *unstructured.Unstructured) string {
	if o.GetNamespace() != "" {
		return fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
	}
	return fmt.Sprintf("%s %s", o.GetKind(), o.GetName())
}

func runHelm(t *testing.T, helm string, args ...string) string {
	t.Helper()
	cmd := helmCommand(t, helm, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out) + stderr.String()
}

// helmTemplate renders the chart as release "test" in the imagecache namespace, CRDs included, so they
// are applied too.
func helmTemplate(t *testing.T, helm, chart string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := helmRender(t, helm, chart, args...)
	if err != nil {
		t.Fatal(err)
	}
	return decodeAll(t, "helm template "+strings.Join(args, " "), out)
}

func helmRender(t *testing.T, helm, chart string, args ...string) ([]byte, error) {
	t.Helper()
	args = append([]string{"template", "test", chart, "--namespace", namespace, "--include-crds"}, args...)
	cmd := helmCommand(t, helm, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out, nil
}

// helmCommand keeps helm's cache, config and plugins out of the user's home.
func helmCommand(t *testing.T, helm string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(t.Context(), helm, args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	return cmd
}

// checkObjects checks what a dry-run cannot: the hardening and probes of the pod, the config file, least
// privilege, and that the objects refer to each other by the right names. name is the StatefulSet's.
func checkObjects(t *testing.T, objs []*unstructured.Unstructured, name string) {
	t.Helper()
	sts := statefulSet(t, objs)
	if sts.Name != name {
		t.Errorf("StatefulSet is named %q, want %q", sts.Name, name)
	}
	checkPod(t, sts)
	checkConfig(t, objs, sts)
	checkRBAC(t, objs, sts)
	checkWiring(t, objs, sts)
}

func checkPod(t *testing.T, sts *appsv1.StatefulSet) {
	t.Helper()
	pod := sts.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("StatefulSet %s has %d containers, want 1", sts.Name, len(pod.Containers))
	}
	ctr := pod.Containers[0]
	psc, sc := pod.SecurityContext, ctr.SecurityContext
	if psc == nil || sc == nil {
		t.Fatalf("StatefulSet %s: pod securityContext %v, container securityContext %v; want both", sts.Name, psc, sc)
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"pod runAsNonRoot: true", isTrue(psc.RunAsNonRoot)},
		{"pod runAsUser: 65532", psc.RunAsUser != nil && *psc.RunAsUser == 65532},
		{"pod runAsGroup: 65532", psc.RunAsGroup != nil && *psc.RunAsGroup == 65532},
		{"pod fsGroup: 65532", psc.FSGroup != nil && *psc.FSGroup == 65532},
		{"pod seccompProfile RuntimeDefault", psc.SeccompProfile != nil && psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault},
		{"container runAsNonRoot: true", isTrue(sc.RunAsNonRoot)},
		{"container readOnlyRootFilesystem: true", isTrue(sc.ReadOnlyRootFilesystem)},
		{"container allowPrivilegeEscalation: false", sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation},
		{"container capabilities drop ALL", sc.Capabilities != nil && slices.Contains(sc.Capabilities.Drop, "ALL") && len(sc.Capabilities.Add) == 0},
		{"liveness probe GET /healthz", httpProbe(ctr.LivenessProbe, "/healthz")},
		{"readiness probe GET /readyz", httpProbe(ctr.ReadinessProbe, "/readyz")},
		{"args starting serve --config /etc/imagecache/config.yaml --storage /var/lib/imagecache",
			len(ctr.Args) >= 5 && slices.Equal(ctr.Args[:5], []string{"serve", "--config", "/etc/imagecache/config.yaml", "--storage", "/var/lib/imagecache"})},
		{"a memory limit", !ctr.Resources.Limits.Memory().IsZero()},
		{"cpu and memory requests", !ctr.Resources.Requests.Cpu().IsZero() && !ctr.Resources.Requests.Memory().IsZero()},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("StatefulSet %s: want %s", sts.Name, c.what)
		}
	}
	// Probes name the port; it must be the container's.
	if !slices.ContainsFunc(ctr.Ports, func(p corev1.ContainerPort) bool { return p.Name == "http" }) {
		t.Errorf("StatefulSet %s: no container port named http for the probes and the Service", sts.Name)
	}
	env := map[string]string{}
	for _, e := range ctr.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_NAMESPACE"] != "metadata.namespace" || env["POD_NAME"] != "metadata.name" {
		t.Errorf("StatefulSet %s: want POD_NAMESPACE and POD_NAME from the downward API, have %v", sts.Name, env)
	}
	// With a read-only root filesystem every writable path must be a volume.
	mounts := map[string]bool{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.MountPath] = true
	}
	for _, p := range []string{"/var/lib/imagecache", "/etc/imagecache", "/tmp"} {
		if !mounts[p] {
			t.Errorf("StatefulSet %s: nothing mounted at %s", sts.Name, p)
		}
	}
}

// checkConfig parses config.yaml as `imagecache serve` would, and checks it fits the pod around it.
func checkConfig(t *testing.T, objs []*unstructured.Unstructured, sts *appsv1.StatefulSet) {
	t.Helper()
	cfg, err := config.Parse([]byte(configYAML(t, objs)), "config.yaml")
	if err != nil {
		t.Fatalf("the ConfigMap's config.yaml does not parse: %v", err)
	}
	port := ""
	for _, p := range sts.Spec.Template.Spec.Containers[0].Ports {
		if p.Name == "http" {
			port = fmt.Sprint(p.ContainerPort)
		}
	}
	if cfg.Listen != "0.0.0.0:"+port {
		t.Errorf("config listen %q, want 0.0.0.0:%s (all interfaces, on the container port)", cfg.Listen, port)
	}
	size := claimSize(t, sts)
	if cfg.Storage.MaxSize <= 0 || cfg.Storage.MaxSize >= size.Value() {
		t.Errorf("config storage.maxSize %d bytes, want a limit below the %s volume", cfg.Storage.MaxSize, size.String())
	}
}

// checkRBAC keeps the permissions least-privilege: no wildcards, Secrets by name only, Leases only in the
// cache's namespace, and the bindings naming the pod's ServiceAccount in the namespace it runs in.
func checkRBAC(t *testing.T, objs []*unstructured.Unstructured, sts *appsv1.StatefulSet) {
	t.Helper()
	ns := sts.Namespace
	sa := sts.Spec.Template.Spec.ServiceAccountName
	var roles, bindings int
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole", "Role":
			roles++
			var r rbacv1.ClusterRole // Role has the same rules field
			fromUnstructured(t, o, &r)
			for _, rule := range r.Rules {
				for _, v := range slices.Concat(rule.Verbs, rule.Resources, rule.APIGroups) {
					if v == "*" {
						t.Errorf("%s: wildcard in rule %v", describe(o), rule)
					}
				}
				if slices.Contains(rule.Resources, "secrets") && !slices.Equal(rule.Verbs, []string{"get"}) {
					t.Errorf("%s: secrets verbs %v, want only get", describe(o), rule.Verbs)
				}
				if slices.Contains(rule.Resources, "leases") && o.GetKind() != "Role" {
					t.Errorf("%s grants leases cluster-wide; leader election needs them only in %s", describe(o), ns)
				}
			}
		case "ClusterRoleBinding", "RoleBinding":
			bindings++
			var b rbacv1.ClusterRoleBinding
			fromUnstructured(t, o, &b)
			for _, s := range b.Subjects {
				if s.Kind != "ServiceAccount" || s.Name != sa || s.Namespace != ns {
					t.Errorf("%s: subject %s %s/%s, want ServiceAccount %s/%s", describe(o), s.Kind, s.Namespace, s.Name, ns, sa)
				}
			}
			if o.GetKind() == "RoleBinding" && o.GetNamespace() != ns {
				t.Errorf("%s is not in %s", describe(o), ns)
			}
		}
	}
	if roles != 2 || bindings != 2 {
		t.Errorf("%d roles and %d bindings, want a ClusterRole, a Role and a binding for each", roles, bindings)
	}
}

// checkWiring checks the names objects use for each other: a dry-run accepts a StatefulSet whose
// ConfigMap or ServiceAccount does not exist, or a Service that selects no pod.
func checkWiring(t *testing.T, objs []*unstructured.Unstructured, sts *appsv1.StatefulSet) {
	t.Helper()
	has := func(kind, name string) bool {
		return slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == kind && o.GetName() == name })
	}
	pod := sts.Spec.Template.Spec
	if !has("ServiceAccount", pod.ServiceAccountName) {
		t.Errorf("StatefulSet %s runs as ServiceAccount %q, which is not rendered", sts.Name, pod.ServiceAccountName)
	}
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil && !has("ConfigMap", v.ConfigMap.Name) {
			t.Errorf("StatefulSet %s mounts ConfigMap %q, which is not rendered", sts.Name, v.ConfigMap.Name)
		}
	}
	if !has("Service", sts.Spec.ServiceName) {
		t.Errorf("StatefulSet %s names Service %q, which is not rendered", sts.Name, sts.Spec.ServiceName)
	}
	labels := sts.Spec.Template.Labels
	selects := func(sel map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	if !selects(sts.Spec.Selector.MatchLabels) {
		t.Errorf("StatefulSet %s: selector %v does not match its pod labels %v", sts.Name, sts.Spec.Selector.MatchLabels, labels)
	}
	var pdbs int
	for _, o := range objs {
		switch o.GetKind() {
		case "Service":
			var s corev1.Service
			fromUnstructured(t, o, &s)
			if !selects(s.Spec.Selector) {
				t.Errorf("Service %s selects %v, not the pods (%v)", s.Name, s.Spec.Selector, labels)
			}
			if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].TargetPort.String() != "http" {
				t.Errorf("Service %s: want one port with targetPort http, have %v", s.Name, s.Spec.Ports)
			}
		case "PodDisruptionBudget":
			pdbs++
			sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
			if !selects(sel) {
				t.Errorf("%s selects %v, not the pods (%v)", describe(o), sel, labels)
			}
			if v, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "maxUnavailable"); fmt.Sprint(v) != "1" {
				t.Errorf("%s: maxUnavailable %v, want 1", describe(o), v)
			}
		}
	}
	if pdbs != 1 {
		t.Errorf("%d PodDisruptionBudgets, want 1", pdbs)
	}
}

func statefulSet(t *testing.T, objs []*unstructured.Unstructured) *appsv1.StatefulSet {
	t.Helper()
	var found []*appsv1.StatefulSet
	for _, o := range objs {
		if o.GetKind() == "StatefulSet" {
			var s appsv1.StatefulSet
			fromUnstructured(t, o, &s)
			found = append(found, &s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d StatefulSets rendered, want 1", len(found))
	}
	return found[0]
}

// service returns the one Service rendered.
func service(t *testing.T, objs []*unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Service" {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d Services rendered, want 1", len(found))
	}
	return found[0]
}

func claimSize(t *testing.T, sts *appsv1.StatefulSet) resource.Quantity {
	t.Helper()
	for _, c := range sts.Spec.VolumeClaimTemplates {
		if c.Name == "data" {
			return c.Spec.Resources.Requests[corev1.ResourceStorage]
		}
	}
	t.Fatalf("StatefulSet %s has no volume claim template named data", sts.Name)
	return resource.Quantity{}
}

func configYAML(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" {
			if s, ok, _ := unstructured.NestedString(o.Object, "data", "config.yaml"); ok {
				return s
			}
		}
	}
	t.Fatal("no ConfigMap with a config.yaml rendered")
	return ""
}

func fromUnstructured(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		t.Fatalf("%s: %v", describe(o), err)
	}
}

func httpProbe(p *corev1.Probe, path string) bool {
	return p != nil && p.HTTPGet != nil && p.HTTPGet.Path == path && p.HTTPGet.Port.String() == "http"
}

func isTrue(b *bool) bool { return b != nil && *b }

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// proxySetup is how the pod runs the intercepting proxy: where it listens and the directory it reads ca.crt
// and ca.key from.
type proxySetup struct{ listen, caDir string }

// proxyFromConfig reads the chart's way: config.yaml's proxy section, parsed as serve parses it.
func proxyFromConfig(t *testing.T, objs []*unstructured.Unstructured) proxySetup {
	t.Helper()
	cfg, err := config.Parse([]byte(configYAML(t, objs)), "config.yaml")
	if err != nil {
		t.Fatalf("config.yaml with the proxy does not parse: %v", err)
	}
	if cfg.Proxy == nil {
		t.Fatal("config.yaml has no proxy.listen: the proxy is off")
	}
	dir := filepath.Dir(cfg.Proxy.CA.CertFile)
	if cfg.Proxy.CA.CertFile != filepath.Join(dir, "ca.crt") || cfg.Proxy.CA.KeyFile != filepath.Join(dir, "ca.key") {
		t.Errorf("config.yaml proxy.ca %+v, want ca.crt and ca.key from one mounted Secret", cfg.Proxy.CA)
	}
	return proxySetup{listen: cfg.Proxy.Listen, caDir: dir}
}

// proxyFromArgs reads the kustomize component's way: serve's --proxy-listen and --proxy-ca flags, which
// override whatever config.yaml says.
func proxyFromArgs(t *testing.T, sts *appsv1.StatefulSet) proxySetup {
	t.Helper()
	var p proxySetup
	args := sts.Spec.Template.Spec.Containers[0].Args
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--proxy-listen="); ok {
			p.listen = v
		}
		if v, ok := strings.CutPrefix(a, "--proxy-ca="); ok {
			p.caDir = v
		}
	}
	if p.listen == "" || p.caDir == "" {
		t.Errorf("StatefulSet %s: args %q, want --proxy-listen= and --proxy-ca=", sts.Name, args)
	}
	return p
}

// checkProxy checks that the proxy listens on all interfaces at 3128, reads its CA from the mounted Secret
// secretName, and that the pod and the Service expose its port.
func checkProxy(t *testing.T, objs []*unstructured.Unstructured, p proxySetup, secretName string) {
	t.Helper()
	if p.listen != "0.0.0.0:3128" || p.caDir != "/etc/imagecache-proxy-ca" {
		t.Errorf("proxy listens on %q with the CA in %q; want 0.0.0.0:3128 and /etc/imagecache-proxy-ca", p.listen, p.caDir)
	}
	spec := statefulSet(t, objs).Spec.Template.Spec
	var port, mount, secret bool
	for _, cp := range spec.Containers[0].Ports {
		port = port || (cp.Name == "proxy" && cp.ContainerPort == 3128)
	}
	for _, m := range spec.Containers[0].VolumeMounts {
		mount = mount || (m.Name == "proxy-ca" && m.MountPath == p.caDir && m.ReadOnly)
	}
	for _, v := range spec.Volumes {
		secret = secret || (v.Name == "proxy-ca" && v.Secret != nil && v.Secret.SecretName == secretName &&
			v.Secret.DefaultMode != nil && *v.Secret.DefaultMode == 0o440)
	}
	if !port || !mount || !secret {
		t.Errorf("StatefulSet: proxy container port 3128 %v, CA volume mounted read-only at %s %v, Secret %s volume with mode 0440 %v; want all",
			port, p.caDir, mount, secretName, secret)
	}
	var svcPort bool
	for _, o := range objs {
		if o.GetKind() != "Service" {
			continue
		}
		var s corev1.Service
		fromUnstructured(t, o, &s)
		for _, sp := range s.Spec.Ports {
			svcPort = svcPort || (sp.Name == "proxy" && sp.Port == 3128 && sp.TargetPort.String() == "proxy")
		}
	}
	if !svcPort {
		t.Error("the Service has no proxy port 3128 with targetPort proxy")
	}
}

// checkCASecret finds the rendered Secret whose name starts with prefix (kustomize appends a hash of its
// content) and checks that the proxy would accept its CA.
func checkCASecret(t *testing.T, objs []*unstructured.Unstructured, prefix string) *corev1.Secret {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Secret" || !strings.HasPrefix(o.GetName(), prefix) {
			continue
		}
		var s corev1.Secret
		fromUnstructured(t, o, &s)
		data := map[string][]byte{}
		maps.Copy(data, s.Data)
		for k, v := range s.StringData {
			data[k] = []byte(v)
		}
		if _, err := proxy.ParseCA(data["ca.crt"], data["ca.key"], time.Now()); err != nil {
			t.Errorf("%s: ca.crt and ca.key are not a CA the proxy accepts: %v", describe(o), err)
		}
		s.Data = data
		return &s
	}
	t.Fatalf("no Secret named %s* rendered", prefix)
	return nil
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
