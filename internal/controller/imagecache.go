package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/docker/cli/cli/config"
	"github.com/docker/cli/cli/config/configfile"
	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"imagecache.io/imagecache/api/v1alpha1"
	"imagecache.io/imagecache/internal/cache"
	icconfig "imagecache.io/imagecache/internal/config"
	"imagecache.io/imagecache/internal/policy"
	"imagecache.io/imagecache/internal/progress"
	"imagecache.io/imagecache/internal/reference"
	"imagecache.io/imagecache/internal/upstream"
)

const (
	defaultRefresh = time.Hour
	pendingRecheck = 2 * time.Second  // while a file set's first fetch runs
	failedRecheck  = 30 * time.Second // to report a failing set's retries
)

type imageCacheReconciler struct{ reconciler }

func (r *imageCacheReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var ic v1alpha1.ImageCache
	if err := r.client.Get(ctx, req.NamespacedName, &ic); err != nil {
		if client404(err) {
			return ctrl.Result{}, r.release("ImageCache", req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if !ic.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.handleDeletion(ctx, "ImageCache", &ic)
	}
	if updated, err := r.ensureFinalizer(ctx, &ic); err != nil || updated {
		return ctrl.Result{Requeue: updated}, err
	}

	secrets, secretProblems := r.pullSecrets(ctx, &ic)
	old := ic.Status.DeepCopy()
	st := v1alpha1.ImageCacheStatus{ObservedGeneration: ic.Generation, Conditions: ic.Status.Conditions}
	var pins, problems []string
	problems = append(problems, secretProblems...)
	var total int64
	cached := 0
	for _, img := range ic.Spec.Images {
		is, pin := r.image(ctx, img, secrets, previous(old.Images, img.Ref))
		st.Images = append(st.Images, is)
		if pin != "" {
			pins = append(pins, pin)
		}
		total += is.Size
		switch is.State {
		case v1alpha1.StateCached:
			cached++
		case v1alpha1.StateStale, v1alpha1.StateFailed:
			problems = append(problems, fmt.Sprintf("image %s: %s", is.Ref, is.Message))
		}
	}
	requeue := refreshInterval(ic.Spec.RefreshInterval)
	wanted := map[string]bool{}
	for _, f := range ic.Spec.Files {
		name := imageCacheSet(req.NamespacedName, f.Name)
		wanted[name] = true
		fs, size := r.fileSet(name, f, refreshInterval(ic.Spec.RefreshInterval))
		st.Files = append(st.Files, fs)
		total += size
		pins = append(pins, "files/"+name)
		switch fs.State {
		case v1alpha1.StateFetching:
			requeue = min(requeue, pendingRecheck)
		case v1alpha1.StateStale, v1alpha1.StateFailed:
			problems = append(problems, fmt.Sprintf("file set %s: %s", f.Name, fs.Message))
			requeue = min(requeue, failedRecheck)
		}
	}
	r.dropSets("ImageCache", req.NamespacedName, wanted)
	if err := r.deps.Store.SetPins(owner("ImageCache", req.NamespacedName), pins); err != nil {
		return ctrl.Result{}, err
	}

	st.CachedImages = fmt.Sprintf("%d/%d", cached, len(ic.Spec.Images))
	st.Size = progress.Bytes(total)
	ready := cached == len(ic.Spec.Images)
	for _, f := range st.Files {
		ready = ready && (f.State == v1alpha1.StateCached || f.State == v1alpha1.StateStale)
	}
	readyReason, readyMsg := "Cached", "every image and file set is cached and served"
	if !ready {
		readyReason, readyMsg = "NotCached", "some images or file sets are not cached yet; see status.images and status.files"
	}
	setConditions(&st.Conditions, ic.Generation, ready, readyReason, readyMsg, problems)
	if r.leader() {
		r.emitEvents(&ic, old, &st)
		ic.Status = st
		if err := r.client.Status().Update(ctx, &ic); err != nil {
			return ctrl.Result{}, err
		}
	}
	for _, is := range st.Images {
		if is.State == v1alpha1.StateFailed {
			// An error makes controller-runtime retry with exponential backoff (not a hot loop, and not an
			// hour's wait for a transient failure). The status above already says what failed.
			return ctrl.Result{}, fmt.Errorf("image %s: %s", is.Ref, is.Message)
		}
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// image fetches one image completely (its pullPolicy deciding how fresh it must be) and returns its status
// and the pin that keeps it.
func (r *imageCacheReconciler) image(ctx context.Context, img v1alpha1.ImageSpec, secrets []*configfile.ConfigFile, prev *v1alpha1.ImageStatus) (v1alpha1.ImageStatus, string) {
	st := v1alpha1.ImageStatus{Ref: img.Ref, State: v1alpha1.StateFetching}
	if prev != nil {
		st.Digest, st.Size = prev.Digest, prev.Size
	}
	up, repo, ref, err := r.deps.Router.ResolveImage(img.Ref)
	if err != nil {
		st.State, st.Message = v1alpha1.StateFailed, err.Error()
		return st, ""
	}
	pin := reference.Join(up+"/"+repo, ref)
	fetchCtx := ctx
	if img.PullPolicy != "" {
		fetchCtx = cache.WithPull(fetchCtx, policy.Pull(img.PullPolicy))
	}
	if auth, id, ok := r.credentials(up, secrets); ok {
		fetchCtx = upstream.WithAuth(fetchCtx, auth, id)
	}
	got, err := r.deps.Cache.Prefetch(fetchCtx, up, repo, ref, img.Platforms)
	now := metav1.Now()
	st.LastCheck = &now
	switch {
	case err != nil:
		st.State, st.Message = v1alpha1.StateFailed, err.Error()
		var ce *cache.Error
		if errors.As(err, &ce) && prev != nil && prev.Digest != "" && ce.Status >= 500 {
			st.State = v1alpha1.StateStale // fetched before; not reachable now
		}
	case got.Stale:
		st.Digest, st.Size = got.Digest, got.Size
		st.State, st.Message = v1alpha1.StateStale, "the upstream could not be reached; the last known good version is cached and served"
	default:
		st.Digest, st.Size, st.State = got.Digest, got.Size, v1alpha1.StateCached
	}
	return st, pin
}

// fileSet serves a declared set and reports it.
func (r *imageCacheReconciler) fileSet(name string, f v1alpha1.FileSetSpec, refresh time.Duration) (v1alpha1.FileSetStatus, int64) {
	cfg := icconfig.FileSet{Set: name, URL: f.URL, SHA256: strings.ToLower(f.SHA256), ChecksumURL: f.ChecksumURL,
		RefreshInterval: refresh, Architecture: icconfig.NormalizeArchitecture(f.Architecture)}
	for _, e := range f.Extract {
		cfg.Extract = append(cfg.Extract, icconfig.Extract{From: e.From, To: e.To})
	}
	if f.MinimumModificationTime != nil {
		cfg.MinimumModificationTime = f.MinimumModificationTime.Time
	}
	st := v1alpha1.FileSetStatus{Name: f.Name, URL: strings.TrimSuffix(r.deps.PublicURL, "/") + "/files/" + name + "/"}
	if err := r.deps.Files.Ensure(cfg); err != nil {
		st.State, st.Message = v1alpha1.StateFailed, err.Error()
		return st, 0
	}
	fs, _ := r.deps.Files.Status(name)
	st.State, st.Message = fileSetState(fs.State), fs.Message
	var size int64
	for _, file := range fs.Files {
		st.Files = append(st.Files, v1alpha1.ServedFile{Name: file.Name, URL: r.fileURL(name, file.Name), Digest: file.Digest,
			Size: file.Size, LastModified: timePtr(metav1.NewTime(file.LastModified))})
		size += file.Size
	}
	return st, size
}

// pullSecrets reads the declared dockerconfigjson Secrets; problems are reported, not fatal.
func (r *imageCacheReconciler) pullSecrets(ctx context.Context, ic *v1alpha1.ImageCache) ([]*configfile.ConfigFile, []string) {
	var out []*configfile.ConfigFile
	var problems []string
	for _, ref := range ic.Spec.PullSecrets {
		var s corev1.Secret
		if err := r.secrets.Get(ctx, types.NamespacedName{Namespace: ic.Namespace, Name: ref.Name}, &s); err != nil {
			problems = append(problems, fmt.Sprintf("pull secret %s/%s: %v", ic.Namespace, ref.Name, err))
			continue
		}
		raw, ok := s.Data[corev1.DockerConfigJsonKey]
		if s.Type != corev1.SecretTypeDockerConfigJson || !ok {
			problems = append(problems, fmt.Sprintf("pull secret %s/%s is not a %s Secret with a %s key", ic.Namespace, ref.Name, corev1.SecretTypeDockerConfigJson, corev1.DockerConfigJsonKey))
			continue
		}
		cf, err := config.LoadFromReader(strings.NewReader(string(raw)))
		if err != nil {
			problems = append(problems, fmt.Sprintf("pull secret %s/%s: malformed %s: %v", ic.Namespace, ref.Name, corev1.DockerConfigJsonKey, err))
			continue
		}
		cf.Filename = ref.Name + "@" + s.ResourceVersion // identifies these credentials in transport caches
		out = append(out, cf)
	}
	return out, problems
}

// credentials picks the first pull secret with credentials for the upstream.
func (r *imageCacheReconciler) credentials(up string, secrets []*configfile.ConfigFile) (authn.Authenticator, string, bool) {
	client, ok := r.deps.Upstreams[up]
	if !ok {
		return nil, "", false
	}
	for _, cf := range secrets {
		if auth, ok, err := client.AuthFromDockerConfig(cf); err == nil && ok {
			return auth, cf.Filename, true
		}
	}
	return nil, "", false
}

// emitEvents records transitions: fetched, stale, failed.
func (r *imageCacheReconciler) emitEvents(ic *v1alpha1.ImageCache, old *v1alpha1.ImageCacheStatus, st *v1alpha1.ImageCacheStatus) {
	for _, is := range st.Images {
		before := ""
		if p := previous(old.Images, is.Ref); p != nil {
			before = p.State
		}
		if before == is.State {
			continue
		}
		switch is.State {
		case v1alpha1.StateCached:
			r.events.Eventf(ic, corev1.EventTypeNormal, "Fetched", "image %s cached as %s (%s)", is.Ref, is.Digest, progress.Bytes(is.Size))
		case v1alpha1.StateStale:
			r.events.Eventf(ic, corev1.EventTypeWarning, "Stale", "image %s: %s", is.Ref, is.Message)
		case v1alpha1.StateFailed:
			r.events.Eventf(ic, corev1.EventTypeWarning, "Failed", "image %s: %s", is.Ref, is.Message)
		}
	}
	for _, fs := range st.Files {
		before := ""
		for _, p := range old.Files {
			if p.Name == fs.Name {
				before = p.State
			}
		}
		if before == fs.State {
			continue
		}
		switch fs.State {
		case v1alpha1.StateCached:
			r.events.Eventf(ic, corev1.EventTypeNormal, "Fetched", "file set %s served at %s", fs.Name, fs.URL)
		case v1alpha1.StateStale:
			r.events.Eventf(ic, corev1.EventTypeWarning, "Stale", "file set %s: %s", fs.Name, fs.Message)
		case v1alpha1.StateFailed:
			r.events.Eventf(ic, corev1.EventTypeWarning, "Failed", "file set %s: %s", fs.Name, fs.Message)
		}
	}
}

func previous(list []v1alpha1.ImageStatus, ref string) *v1alpha1.ImageStatus {
	for i := range list {
		if list[i].Ref == ref {
			return &list[i]
		}
	}
	return nil
}

func refreshInterval(d *metav1.Duration) time.Duration {
	if d == nil || d.Duration <= 0 {
		return defaultRefresh
	}
	return d.Duration
}

var _ client.Object = &v1alpha1.ImageCache{}
