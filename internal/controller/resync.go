package controller

import (
	"context"
	"log/slog"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"imagecache.io/imagecache/api/v1alpha1"
)

// resync enqueues every resource when this replica becomes the leader. The reconciles it made as a follower
// wrote no status, and nothing else would bring them back before the next periodic reconcile (an hour by
// default); the reconciles it starts mostly reuse this replica's recent checks, so they cost the upstreams
// nothing.
type resync struct {
	reader              client.Reader
	imageCaches, ironic chan<- event.GenericEvent
	log                 *slog.Logger
}

// NeedLeaderElection makes the manager start it only once this replica is elected.
func (r *resync) NeedLeaderElection() bool { return true }

func (r *resync) Start(ctx context.Context) error {
	var ics v1alpha1.ImageCacheList
	var iics v1alpha1.IronicImageCacheList
	if err := r.reader.List(ctx, &ics); err != nil {
		r.log.Warn("list ImageCaches after winning the election; their status waits for their next reconcile", "error", err)
	}
	if err := r.reader.List(ctx, &iics); err != nil {
		r.log.Warn("list IronicImageCaches after winning the election; their status waits for their next reconcile", "error", err)
	}
	for i := range ics.Items {
		if !send(ctx, r.imageCaches, &ics.Items[i]) {
			return nil
		}
	}
	for i := range iics.Items {
		if !send(ctx, r.ironic, &iics.Items[i]) {
			return nil
		}
	}
	r.log.Info("elected: reconciling every resource to write its status", "imageCaches", len(ics.Items), "ironicImageCaches", len(iics.Items))
	return nil
}

// send waits for the controller to take the event (its source may start a moment after this runnable).
func send(ctx context.Context, ch chan<- event.GenericEvent, obj client.Object) bool {
	select {
	case ch <- event.GenericEvent{Object: obj}:
		return true
	case <-ctx.Done():
		return false
	}
}
