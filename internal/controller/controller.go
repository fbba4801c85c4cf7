// Package controller runs the ImageCache and IronicImageCache controllers inside imagecache serve. Every
// replica reconciles every resource into its own store (fetch, pin, serve); only the elected leader writes
// status, events and finalizers, so replicas never fight over the API objects.
package controller

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"imagecache.io/imagecache/api/v1alpha1"
	"imagecache.io/imagecache/internal/cache"
	"imagecache.io/imagecache/internal/files"
	"imagecache.io/imagecache/internal/reference"
	"imagecache.io/imagecache/internal/store"
	"imagecache.io/imagecache/internal/upstream"
)

// finalizer makes deletion wait until the leader has released the resource's pins.
const finalizer = "imagecache.io/release-pins"

// Deps is what the controllers drive: the server's own cache, file sets and store.
type Deps struct {
	Cache     *cache.Cache
	Files     *files.Manager
	Store     *store.Store
	Router    *reference.Router
	Upstreams map[string]*upstream.Client
	PublicURL string // how clients reach this server, for the URLs in status
	Log       *slog.Logger
}

// Controllers outlives the controller-runtime managers it is set up with: serve builds a new manager when one
// stops (a stopped manager cannot be started again), and what the file sets report and what this replica
// last checked must carry over from one manager to the next.
type Controllers struct {
	deps Deps
	// File sets report here when a refresh attempt ends; each manager's controllers read them.
	icChanges, ironicChanges chan event.GenericEvent
	checks                   *imageChecks
}

// New makes the controllers' lasting state and subscribes to the file sets' changes.
func New(d Deps) *Controllers {
	c := &Controllers{deps: d, icChanges: make(chan event.GenericEvent, 64), ironicChanges: make(chan event.GenericEvent, 64),
		checks: newImageChecks()}
	// A file set's refresh finishes on its own schedule; its owner is reconciled when it does, so status
	// follows the set within moments rather than at the next periodic reconcile.
	d.Files.OnChange = c.setChanged
	return c
}

func (c *Controllers) setChanged(set string) {
	kind, key, ok := ownerOfSet(set)
	if !ok {
		return
	}
	var obj client.Object = &v1alpha1.ImageCache{}
	ch := c.icChanges
	if kind == "IronicImageCache" {
		obj, ch = &v1alpha1.IronicImageCache{}, c.ironicChanges
	}
	obj.SetNamespace(key.Namespace)
	obj.SetName(key.Name)
	select {
	case ch <- event.GenericEvent{Object: obj}:
	default: // a reconcile is already queued for plenty of reasons
	}
}

// Setup registers both controllers, the start-up sweep and the resync on election with mgr.
func (c *Controllers) Setup(mgr manager.Manager) error {
	base := reconciler{deps: c.deps, client: mgr.GetClient(), secrets: mgr.GetAPIReader(), elected: mgr.Elected(), events: mgr.GetEventRecorderFor("imagecache")}
	// Every replica reconciles (fetches and pins). The names are reused by the next manager after a restart,
	// which controller-runtime's process-wide uniqueness check would refuse.
	everyReplica := controller.Options{NeedLeaderElection: ptr.To(false), SkipNameValidation: ptr.To(true)}
	icElected, ironicElected := make(chan event.GenericEvent), make(chan event.GenericEvent)
	if err := ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.ImageCache{}, builder.WithPredicates(worthReconciling())).
		WithOptions(everyReplica).
		WatchesRawSource(source.Channel(c.icChanges, &handler.EnqueueRequestForObject{})).
		WatchesRawSource(source.Channel(icElected, &handler.EnqueueRequestForObject{})).
		Complete(&imageCacheReconciler{reconciler: base, checks: c.checks}); err != nil {
		return fmt.Errorf("set up the ImageCache controller: %w", err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.IronicImageCache{}, builder.WithPredicates(worthReconciling())).
		WithOptions(everyReplica).
		WatchesRawSource(source.Channel(c.ironicChanges, &handler.EnqueueRequestForObject{})).
		WatchesRawSource(source.Channel(ironicElected, &handler.EnqueueRequestForObject{})).
		Complete(&ironicReconciler{reconciler: base}); err != nil {
		return fmt.Errorf("set up the IronicImageCache controller: %w", err)
	}
	if err := mgr.Add(&sweep{reconciler: base, cache: mgr.GetCache()}); err != nil {
		return err
	}
	return mgr.Add(&resync{reader: mgr.GetClient(), imageCaches: icElected, ironic: ironicElected, log: c.deps.Log})
}

// worthReconciling passes the watch events that call for a reconcile: creation and deletion, and updates
// that change the spec (generation), change the annotations (kubectl annotate asks for a check now), start
// the deletion or remove our finalizer. The status writes every reconcile makes pass none of them: reacting
// to those doubled every upstream check.
func worthReconciling() predicate.Predicate {
	return predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{},
		predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			deleting := e.ObjectOld.GetDeletionTimestamp().IsZero() && !e.ObjectNew.GetDeletionTimestamp().IsZero()
			lostFinalizer := controllerutil.ContainsFinalizer(e.ObjectOld, finalizer) && !controllerutil.ContainsFinalizer(e.ObjectNew, finalizer)
			return deleting || lostFinalizer
		}})
}

// Set names: an ImageCache's sets are <namespace>_<name>_<set>; an IronicImageCache's are
// <namespace>_<name>~agent[_<arch>]. Neither "_" nor "~" can appear in a namespace or resource name, so names
// never collide and the owner can be read back.
func imageCacheSet(key types.NamespacedName, set string) string {
	return key.Namespace + "_" + key.Name + "_" + set
}

func ironicSet(key types.NamespacedName, arch string) string {
	name := key.Namespace + "_" + key.Name + "~agent"
	if arch != "" {
		name += "_" + arch
	}
	return name
}

// setsOf is the prefix of every set a resource creates.
func setsOf(kind string, key types.NamespacedName) string {
	if kind == "IronicImageCache" {
		return key.Namespace + "_" + key.Name + "~"
	}
	return key.Namespace + "_" + key.Name + "_"
}

func ownerOfSet(set string) (kind string, key types.NamespacedName, ok bool) {
	kind = "ImageCache"
	if i := strings.IndexByte(set, '~'); i >= 0 {
		kind, set = "IronicImageCache", set[:i]+"_"
	}
	parts := strings.SplitN(set, "_", 3)
	if len(parts) < 3 || parts[0] == "" || parts[1] == "" {
		return "", types.NamespacedName{}, false
	}
	return kind, types.NamespacedName{Namespace: parts[0], Name: parts[1]}, true
}

// reconciler is what both controllers share.
type reconciler struct {
	deps   Deps
	client client.Client
	// secrets reads Secrets straight from the API server: the RBAC grants get only (no list/watch of every
	// Secret in the cluster), which a cached client would need.
	secrets client.Reader
	elected <-chan struct{}
	events  record.EventRecorder
}

func (r *reconciler) leader() bool {
	select {
	case <-r.elected:
		return true
	default:
		return false
	}
}

// owner names a resource in the store's pins.
func owner(kind string, key types.NamespacedName) string {
	return "k8s/" + kind + "/" + key.Namespace + "/" + key.Name
}

// release drops everything a resource holds in this replica: its pins and the file sets it created. The
// content stays cached, evictable.
func (r *reconciler) release(kind string, key types.NamespacedName) error {
	r.dropSets(kind, key, nil)
	return r.deps.Store.SetPins(owner(kind, key), nil)
}

// dropSets removes the sets a resource created that are not in keep.
func (r *reconciler) dropSets(kind string, key types.NamespacedName, keep map[string]bool) {
	prefix := setsOf(kind, key)
	for _, name := range r.deps.Files.Names() {
		if strings.HasPrefix(name, prefix) && !keep[name] {
			r.deps.Files.Remove(name)
		}
	}
}

// handleDeletion releases a resource that is gone or going, and lets the leader remove the finalizer.
func (r *reconciler) handleDeletion(ctx context.Context, kind string, obj client.Object) error {
	key := client.ObjectKeyFromObject(obj)
	if err := r.release(kind, key); err != nil {
		return err
	}
	if r.leader() && controllerutil.RemoveFinalizer(obj, finalizer) {
		return r.client.Update(ctx, obj)
	}
	return nil
}

// ensureFinalizer adds the finalizer (leader only). The update leaves obj at its new resourceVersion, so the
// reconcile goes on with it: requeueing instead would read the informer's copy, which may not have the
// finalizer yet, and try again into a conflict.
func (r *reconciler) ensureFinalizer(ctx context.Context, obj client.Object) error {
	if !r.leader() || !controllerutil.AddFinalizer(obj, finalizer) {
		return nil
	}
	return r.client.Update(ctx, obj)
}

// conflictRetry is how soon a reconcile that lost an update race runs again.
const conflictRetry = time.Second

// retryOnConflict turns a conflict (the object changed since it was read: a user's edit, another write of
// ours) into a quiet retry that reads the new version; other errors go to controller-runtime's backoff.
func retryOnConflict(err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return ctrl.Result{}, err
}

func (r *reconciler) fileURL(set, file string) string {
	return strings.TrimSuffix(r.deps.PublicURL, "/") + "/files/" + set + "/" + file
}
