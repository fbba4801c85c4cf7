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
	"sigs.k8s.io/controller-runtime/pkg/manager"

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
	base := reconciler{deps: d, client: mgr.GetClient(), elected: mgr.Elected(), events: mgr.GetEventRecorderFor("imagecache")}
	everyReplica := controller.Options{NeedLeaderElection: ptr.To(false)}
	if err := ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.ImageCache{}).WithOptions(everyReplica).
		Complete(&imageCacheReconciler{reconciler: base}); err != nil {
		return fmt.Errorf("set up the ImageCache controller: %w", err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.IronicImageCache{}).WithOptions(everyReplica).
		Complete(&ironicReconciler{reconciler: base}); err != nil {
		return fmt.Errorf("set up the IronicImageCache controller: %w", err)
	}
	return mgr.Add(&sweep{reconciler: base, cache: mgr.GetCache()})
}

// reconciler is what both controllers share.
type reconciler struct {
	deps    Deps
	client  client.Client
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

// setName is a served file set's name: "_" cannot appear in namespaces or resource names, so it cannot be
// ambiguous.
func setName(key types.NamespacedName, parts ...string) string {
	return strings.Join(append([]string{key.Namespace, key.Name}, parts...), "_")
}

// release drops everything a resource holds in this replica: its pins and the file sets it created. The
// content stays cached, evictable.
func (r *reconciler) release(kind string, key types.NamespacedName) error {
	prefix := setName(key) + "_"
	for _, name := range r.deps.Files.Names() {
		if name == setName(key) || strings.HasPrefix(name, prefix) {
			r.deps.Files.Remove(name)
		}
	}
	return r.deps.Store.SetPins(owner(kind, key), nil)
}

// handleDeletion releases a resource that is gone or going, and lets the leader remove the finalizer.
func (r *reconciler) handleDeletion(ctx context.Context, kind string, obj client.Object) error {
	key := client.ObjectKeyFromObject(obj)
	if err := r.release(kind, key); err != nil {
		return err
	}
	if r.leader() && controllerutilRemove(obj) {
		return r.client.Update(ctx, obj)
	}
	return nil
}

// ensureFinalizer adds the finalizer (leader only); it reports whether the object was updated.
func (r *reconciler) ensureFinalizer(ctx context.Context, obj client.Object) (bool, error) {
	if !r.leader() || hasFinalizer(obj) {
		return false, nil
	}
	obj.SetFinalizers(append(obj.GetFinalizers(), finalizer))
	return true, r.client.Update(ctx, obj)
}

func hasFinalizer(obj client.Object) bool {
	for _, f := range obj.GetFinalizers() {
		if f == finalizer {
			return true
		}
	}
	return false
}

func controllerutilRemove(obj client.Object) bool {
	var kept []string
	for _, f := range obj.GetFinalizers() {
		if f != finalizer {
			kept = append(kept, f)
		}
	}
	if len(kept) == len(obj.GetFinalizers()) {
		return false
	}
	obj.SetFinalizers(kept)
	return true
}

func (r *reconciler) fileURL(set, file string) string {
	return strings.TrimSuffix(r.deps.PublicURL, "/") + "/files/" + set + "/" + file
}
