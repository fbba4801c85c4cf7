// Package controller runs the ImageCache and IronicImageCache controllers inside imagecache serve. Every
// replica reconciles every resource into its own store (fetch, pin, serve); only the elected leader writes
// status, events and finalizers, so replicas never fight over the API objects.
package controller

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
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

// Setup registers both controllers and the start-up sweep with mgr.
func Setup(mgr manager.Manager, d Deps) error {
	base := reconciler{deps: d, client: mgr.GetClient(), secrets: mgr.GetAPIReader(), elected: mgr.Elected(), events: mgr.GetEventRecorderFor("imagecache")}
	everyReplica := controller.Options{NeedLeaderElection: ptr.To(false)}
	// A file set's refresh finishes on its own schedule; its owner is reconciled when it does, so status
	// follows the set within moments rather than at the next periodic reconcile.
	icChanges, ironicChanges := make(chan event.GenericEvent, 64), make(chan event.GenericEvent, 64)
	d.Files.OnChange = func(set string) {
		kind, key, ok := ownerOfSet(set)
		if !ok {
			return
		}
		var obj client.Object = &v1alpha1.ImageCache{}
		ch := icChanges
		if kind == "IronicImageCache" {
			obj, ch = &v1alpha1.IronicImageCache{}, ironicChanges
		}
		obj.SetNamespace(key.Namespace)
		obj.SetName(key.Name)
		select {
		case ch <- event.GenericEvent{Object: obj}:
		default: // a reconcile is already queued for plenty of reasons
		}
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.ImageCache{}).WithOptions(everyReplica).
		WatchesRawSource(source.Channel(icChanges, &handler.EnqueueRequestForObject{})).
		Complete(&imageCacheReconciler{reconciler: base}); err != nil {
		return fmt.Errorf("set up the ImageCache controller: %w", err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.IronicImageCache{}).WithOptions(everyReplica).
		WatchesRawSource(source.Channel(ironicChanges, &handler.EnqueueRequestForObject{})).
		Complete(&ironicReconciler{reconciler: base}); err != nil {
		return fmt.Errorf("set up the IronicImageCache controller: %w", err)
	}
	return mgr.Add(&sweep{reconciler: base, cache: mgr.GetCache()})
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

// ensureFinalizer adds the finalizer (leader only); it reports whether the object was updated.
func (r *reconciler) ensureFinalizer(ctx context.Context, obj client.Object) (bool, error) {
	if !r.leader() || !controllerutil.AddFinalizer(obj, finalizer) {
		return false, nil
	}
	return true, r.client.Update(ctx, obj)
}

func (r *reconciler) fileURL(set, file string) string {
	return strings.TrimSuffix(r.deps.PublicURL, "/") + "/files/" + set + "/" + file
}
