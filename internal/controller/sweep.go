package controller

import (
	"context"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"imagecache.io/imagecache/api/v1alpha1"
)

// sweep releases, once the informers have synced, the pins of resources deleted while this replica was
// down (it never saw them go).
type sweep struct {
	reconciler
	cache cache.Cache
}

func (s *sweep) NeedLeaderElection() bool { return false }

func (s *sweep) Start(ctx context.Context) error {
	if !s.cache.WaitForCacheSync(ctx) {
		return nil
	}
	pins, err := s.deps.Store.Pins()
	if err != nil {
		s.deps.Log.Warn("sweep stale pins", "error", err)
		return nil
	}
	seen := map[string]bool{}
	for _, p := range pins {
		parts := strings.Split(p.Owner, "/")
		if len(parts) != 4 || parts[0] != "k8s" || seen[p.Owner] {
			continue
		}
		seen[p.Owner] = true
		key := types.NamespacedName{Namespace: parts[2], Name: parts[3]}
		var err error
		switch parts[1] {
		case "ImageCache":
			err = s.client.Get(ctx, key, &v1alpha1.ImageCache{})
		case "IronicImageCache":
			err = s.client.Get(ctx, key, &v1alpha1.IronicImageCache{})
		default:
			continue
		}
		if err != nil && client404(err) {
			s.deps.Log.Info("releasing the pins of a resource deleted while this replica was down", "owner", p.Owner)
			s.release(parts[1], key)
		}
	}
	return nil
}
