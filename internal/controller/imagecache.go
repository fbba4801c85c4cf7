package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	"imagecache.io/imagecache/internal/files"
	"imagecache.io/imagecache/internal/policy"
	"imagecache.io/imagecache/internal/progress"
	"imagecache.io/imagecache/internal/reference"
	"imagecache.io/imagecache/internal/upstream"
)

const (
	defaultRefresh = time.Hour
	// minRefresh is the admission minimum, applied again here for objects stored before the rule existed:
	// every check costs each image an upstream request.
	minRefresh     = 10 * time.Second
	pendingRecheck = 2 * time.Second  // while a file set's first fetch runs
	failedRecheck  = 30 * time.Second // to report a failing set's retries
)

type imageCacheReconciler struct {
	reconciler
	checks *imageChecks
}

func (r *imageCacheReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var ic v1alpha1.ImageCache
	if err := r.client.Get(ctx, req.NamespacedName, &ic); err != nil {
		if client404(err) {
			r.checks.forget(req.NamespacedName)
			return ctrl.Result{}, r.release("ImageCache", req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if !ic.DeletionTimestamp.IsZero() {
		r.checks.forget(req.NamespacedName)
		return retryOnConflict(r.handleDeletion(ctx, "ImageCache", &ic))
	}
	if err := r.ensureFinalizer(ctx, &ic); err != nil {
		return retryOnConflict(err)
	}

	refresh := refreshInterval(ic.Spec.RefreshInterval)
	old := ic.Status.DeepCopy()
	secrets, secretIDs, secretProblems := r.pullSecrets(ctx, &ic)
	check := r.checkImages(ctx, &ic, secrets, secretIDs, refresh, old)
	files, filePins, fileProblems, requeue := r.fileSets(req.NamespacedName, ic.Spec.Files, secrets, refresh)
	if err := r.deps.Store.SetPins(owner("ImageCache", req.NamespacedName), slices.Concat(check.pins, filePins)); err != nil {
		return ctrl.Result{}, err
	}
	st := v1alpha1.ImageCacheStatus{ObservedGeneration: ic.Generation, Conditions: ic.Status.Conditions, Images: check.images, Files: files}
	summarize(&st, len(ic.Spec.Images), slices.Concat(secretProblems, imageProblems(check.images), fileProblems))
	if r.leader() {
		r.emitEvents(&ic, old, &st)
		r.secretEvents(&ic, old, secretProblems)
		ic.Status = st
		if err := r.client.Status().Update(ctx, &ic); err != nil {
			return retryOnConflict(err)
		}
	}
	for _, is := range st.Images {
		if is.State == v1alpha1.StateFailed {
			// An error makes controller-runtime retry with exponential backoff (not a hot loop, and not an
			// hour's wait for a transient failure). The status above already says what failed.
			return ctrl.Result{}, fmt.Errorf("image %s: %s", is.Ref, is.Message)
		}
	}
	return ctrl.Result{RequeueAfter: min(requeue, max(time.Until(check.at.Add(refresh)), checkSlack))}, nil
}

// checkImages checks every image, unless this replica did so with the same inputs less than refresh ago.
// A check with a failed image is not remembered: the retry must check again.
func (r *imageCacheReconciler) checkImages(ctx context.Context, ic *v1alpha1.ImageCache, secrets []*configfile.ConfigFile, secretIDs []string, refresh time.Duration, old *v1alpha1.ImageCacheStatus) imageCheck {
	key, inputs, now := client.ObjectKeyFromObject(ic), checkInputs(ic, secretIDs), time.Now()
	if last, ok := r.checks.recent(key, inputs, refresh, now); ok {
		return last
	}
	check := imageCheck{inputs: inputs, at: now}
	failed := false
	for _, img := range ic.Spec.Images {
		is, pin := r.image(ctx, img, secrets, previous(old.Images, img.Ref))
		check.images = append(check.images, is)
		if pin != "" {
			check.pins = append(check.pins, pin)
		}
		failed = failed || is.State == v1alpha1.StateFailed
	}
	if !failed {
		r.checks.remember(key, check)
	}
	return check
}

func imageProblems(images []v1alpha1.ImageStatus) []string {
	var problems []string
	for _, is := range images {
		if is.State == v1alpha1.StateStale || is.State == v1alpha1.StateFailed {
			problems = append(problems, fmt.Sprintf("image %s: %s", is.Ref, is.Message))
		}
	}
	return problems
}

// fileSets serves the declared sets (dropping the ones no longer declared) and says when to look again.
func (r *imageCacheReconciler) fileSets(key types.NamespacedName, specs []v1alpha1.FileSetSpec, secrets []*configfile.ConfigFile, refresh time.Duration) ([]v1alpha1.FileSetStatus, []string, []string, time.Duration) {
	var out []v1alpha1.FileSetStatus
	var pins, problems []string
	requeue := refresh
	wanted := map[string]bool{}
	for _, f := range specs {
		name := imageCacheSet(key, f.Name)
		wanted[name] = true
		fs, tooOld := r.fileSet(name, f, r.ociCredentials(f.URL, secrets), refresh)
		out = append(out, fs)
		pins = append(pins, "files/"+name)
		switch fs.State {
		case v1alpha1.StateFetching:
			requeue = min(requeue, pendingRecheck)
		case v1alpha1.StateStale, v1alpha1.StateFailed:
			problems = append(problems, fmt.Sprintf("file set %s: %s", f.Name, fs.Message))
			requeue = min(requeue, failedRecheck)
		default:
			if tooOld {
				problems = append(problems, fmt.Sprintf("file set %s: %s", f.Name, fs.Message))
			}
		}
	}
	r.dropSets("ImageCache", key, wanted)
	return out, pins, problems, requeue
}

// summarize fills the printer columns and the conditions. Stale entries count as available: "cached" means
// pullable with the upstream gone, and a stale entry is exactly that; Degraded says they could not be
// checked.
func summarize(st *v1alpha1.ImageCacheStatus, declared int, problems []string) {
	var total int64
	available := 0
	for _, is := range st.Images {
		total += is.Size
		if servable(is.State) {
			available++
		}
	}
	ready := available == declared
	for _, f := range st.Files {
		for _, file := range f.Files {
			total += file.Size
		}
		ready = ready && servable(f.State)
	}
	st.CachedImages = fmt.Sprintf("%d/%d", available, declared)
	st.Size = progress.Bytes(total)
	readyReason, readyMsg := "Cached", "every image and file set is cached and served"
	switch {
	case !ready:
		readyReason, readyMsg = "NotCached", "some images or file sets are not cached yet; see status.images and status.files"
	case len(problems) > 0:
		readyMsg += "; some could not be checked or refreshed, see the Degraded condition"
	}
	setConditions(&st.Conditions, st.ObservedGeneration, ready, readyReason, readyMsg, problems)
}

// servable: the entry is in the store and served, checked or not.
func servable(state string) bool {
	return state == v1alpha1.StateCached || state == v1alpha1.StateStale
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

// fileSet serves a declared set and reports it, and whether the upstream's copy is still older than the
// set's minimumModificationTime (served, but not what was asked for).
func (r *imageCacheReconciler) fileSet(name string, f v1alpha1.FileSetSpec, creds *icconfig.Credentials, refresh time.Duration) (v1alpha1.FileSetStatus, bool) {
	cfg := icconfig.FileSet{Set: name, URL: f.URL, SHA256: strings.ToLower(f.SHA256), ChecksumURL: f.ChecksumURL,
		RefreshInterval: refresh, Architecture: icconfig.NormalizeArchitecture(f.Architecture), PullCredentials: creds}
	for _, e := range f.Extract {
		cfg.Extract = append(cfg.Extract, icconfig.Extract{From: e.From, To: e.To})
	}
	if f.MinimumModificationTime != nil {
		cfg.MinimumModificationTime = f.MinimumModificationTime.Time
	}
	st := v1alpha1.FileSetStatus{Name: f.Name, URL: strings.TrimSuffix(r.deps.PublicURL, "/") + "/files/" + name + "/"}
	if err := r.deps.Files.Ensure(cfg); err != nil {
		st.State, st.Message = v1alpha1.StateFailed, err.Error()
		return st, false
	}
	fs, _ := r.deps.Files.Status(name)
	st.State, st.Message = fileSetState(fs.State), fs.Message
	if fs.OlderThanMinimum {
		st.Message = withOlderThanMinimum(st.Message, f.URL, "minimumModificationTime")
	}
	for _, file := range fs.Files {
		st.Files = append(st.Files, v1alpha1.ServedFile{Name: file.Name, URL: r.fileURL(name, file.Name), Digest: file.Digest,
			Size: file.Size, LastModified: timePtr(metav1.NewTime(file.LastModified))})
	}
	return st, fs.OlderThanMinimum
}

// pullSecrets reads the declared dockerconfigjson Secrets; problems are reported, not fatal. ids name the
// versions read (a changed or newly created Secret makes the images be checked again with it).
func (r *imageCacheReconciler) pullSecrets(ctx context.Context, ic *v1alpha1.ImageCache) (out []*configfile.ConfigFile, ids, problems []string) {
	for _, ref := range ic.Spec.PullSecrets {
		var s corev1.Secret
		if err := r.secrets.Get(ctx, types.NamespacedName{Namespace: ic.Namespace, Name: ref.Name}, &s); err != nil {
			problems = append(problems, fmt.Sprintf("pull secret %s/%s: %v", ic.Namespace, ref.Name, err))
			continue
		}
		ids = append(ids, ref.Name+"@"+s.ResourceVersion)
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
	return out, ids, problems
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

// ociCredentials are the pull secret's credentials for an oci:// file set's registry, or nil (an http(s)
// source, or no secret for that registry: the upstream's own credentials apply).
func (r *imageCacheReconciler) ociCredentials(rawURL string, secrets []*configfile.ConfigFile) *icconfig.Credentials {
	if !strings.HasPrefix(rawURL, "oci://") || len(secrets) == 0 {
		return nil
	}
	up, _, _, err := files.ResolveOCI(r.deps.Router, rawURL)
	if err != nil {
		return nil // the file set reports the bad source itself
	}
	auth, _, ok := r.credentials(up, secrets)
	if !ok {
		return nil
	}
	ac, err := auth.Authorization()
	if err != nil {
		return nil
	}
	return &icconfig.Credentials{Username: ac.Username, Password: ac.Password, Token: ac.RegistryToken}
}

// emitEvents records transitions: fetched, moved to a new digest, stale, failed.
func (r *imageCacheReconciler) emitEvents(ic *v1alpha1.ImageCache, old *v1alpha1.ImageCacheStatus, st *v1alpha1.ImageCacheStatus) {
	for _, is := range st.Images {
		before, beforeDigest := "", ""
		if p := previous(old.Images, is.Ref); p != nil {
			before, beforeDigest = p.State, p.Digest
		}
		if before == is.State {
			if is.State == v1alpha1.StateCached && beforeDigest != "" && beforeDigest != is.Digest {
				r.events.Eventf(ic, corev1.EventTypeNormal, "Updated", "image %s moved from %s to %s (%s)", is.Ref, beforeDigest, is.Digest, progress.Bytes(is.Size))
			}
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

// secretEvents warns about a pull secret that is missing or unusable, once: when the problem first appears
// in the Degraded condition.
func (r *imageCacheReconciler) secretEvents(ic *v1alpha1.ImageCache, old *v1alpha1.ImageCacheStatus, problems []string) {
	before := ""
	if d := condition(old.Conditions, v1alpha1.ConditionDegraded); d != nil && d.Status == metav1.ConditionTrue {
		before = d.Message
	}
	for _, p := range problems {
		if !strings.Contains(before, p) {
			r.events.Event(ic, corev1.EventTypeWarning, "PullSecret", p)
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

// refreshInterval is the spec's, within bounds: admission refuses less than minRefresh, but objects stored
// before that rule may still say 10ms (which hammered the upstream) or 0s.
func refreshInterval(d *metav1.Duration) time.Duration {
	if d == nil || d.Duration <= 0 {
		return defaultRefresh
	}
	return max(d.Duration, minRefresh)
}

var _ client.Object = &v1alpha1.ImageCache{}
