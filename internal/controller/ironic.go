package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"imagecache.io/imagecache/api/v1alpha1"
	icconfig "imagecache.io/imagecache/internal/config"
)

const (
	defaultAgentURL    = "https://tarballs.opendev.org/openstack/ironic-python-agent/dib"
	defaultArch        = "x86_64"
	notUsedDownloader  = "spec.agentDownloaderImage is not used: imagecache downloads, verifies and serves the agent itself"
	agentFileBase      = "ironic-python-agent"
	agentRefreshPeriod = defaultRefresh
)

type ironicReconciler struct{ reconciler }

// agentArch is one architecture's source and published names.
type agentArch struct {
	arch, set, source, kernel, initramfs string
}

// agentArches follows the downloader's conventions: x86_64 is the plain tarball and plain file names; any
// other architecture A is ipa-<flavor>-<branch>_A.tar.gz, published as ironic-python-agent_A.*.
func agentArches(key types.NamespacedName, spec v1alpha1.IronicImageCacheSpec) []agentArch {
	base := strings.TrimSuffix(orDefault(spec.AgentDownloadURL, defaultAgentURL), "/")
	stem := "ipa-" + orDefault(spec.AgentFlavor, "centos9") + "-" + strings.ReplaceAll(orDefault(spec.AgentBranch, "master"), "/", "-")
	arches := spec.Architectures
	if len(arches) == 0 {
		arches = []string{defaultArch}
	}
	var out []agentArch
	for _, a := range arches {
		if icconfig.NormalizeArchitecture(a) == "amd64" {
			out = append(out, agentArch{arch: a, set: ironicSet(key, ""), source: base + "/" + stem + ".tar.gz",
				kernel: agentFileBase + ".kernel", initramfs: agentFileBase + ".initramfs"})
			continue
		}
		out = append(out, agentArch{arch: a, set: ironicSet(key, a), source: base + "/" + stem + "_" + a + ".tar.gz",
			kernel: agentFileBase + "_" + a + ".kernel", initramfs: agentFileBase + "_" + a + ".initramfs"})
	}
	return out
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (r *ironicReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var iic v1alpha1.IronicImageCache
	if err := r.client.Get(ctx, req.NamespacedName, &iic); err != nil {
		if client404(err) {
			return ctrl.Result{}, r.release("IronicImageCache", req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if !iic.DeletionTimestamp.IsZero() {
		return retryOnConflict(r.handleDeletion(ctx, "IronicImageCache", &iic))
	}
	if err := r.ensureFinalizer(ctx, &iic); err != nil {
		return retryOnConflict(err)
	}

	arches := agentArches(req.NamespacedName, iic.Spec)
	old := iic.Status.DeepCopy()
	st := v1alpha1.IronicImageCacheStatus{ObservedGeneration: iic.Generation, Conditions: iic.Status.Conditions}
	if iic.Spec.AgentDownloaderImage != "" {
		st.DownloaderImage = notUsedDownloader
	}
	var pins, problems []string
	wanted := map[string]bool{}
	requeue := agentRefreshPeriod
	ready := true
	for _, a := range arches {
		wanted[a.set] = true
		pins = append(pins, "files/"+a.set)
		as, tooOld := r.arch(a, iic.Spec)
		st.Architectures = append(st.Architectures, as)
		switch {
		case as.State == v1alpha1.StateFetching:
			requeue = min(requeue, pendingRecheck)
		case as.State == v1alpha1.StateStale, as.State == v1alpha1.StateFailed:
			problems = append(problems, fmt.Sprintf("%s: %s", a.arch, as.Message))
			requeue = min(requeue, failedRecheck)
		case tooOld:
			problems = append(problems, fmt.Sprintf("%s: %s", a.arch, as.Message))
		}
		if as.KernelDigest == "" || as.InitramfsDigest == "" {
			ready = false
		}
	}
	r.dropSets("IronicImageCache", req.NamespacedName, wanted)
	if err := r.deps.Store.SetPins(owner("IronicImageCache", req.NamespacedName), pins); err != nil {
		return ctrl.Result{}, err
	}
	first := st.Architectures[0]
	st.KernelURL, st.InitramfsURL, st.LastModified = first.KernelURL, first.InitramfsURL, first.LastModified
	readyReason, readyMsg := "AgentServed", fmt.Sprintf("the agent is served for %d architecture(s); point Ironic's deploy_kernel/deploy_ramdisk at status.kernelURL/initramfsURL", len(arches))
	if !ready {
		readyReason, readyMsg = "AgentNotServed", "not every requested architecture has both its kernel and initramfs yet; see status.architectures"
	}
	setConditions(&st.Conditions, iic.Generation, ready, readyReason, readyMsg, problems)
	if r.leader() {
		r.emitEvents(&iic, old, &st)
		iic.Status = st
		if err := r.client.Status().Update(ctx, &iic); err != nil {
			return retryOnConflict(err)
		}
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// arch serves one architecture's set and reports it, and whether the agent at the download site is still
// older than agentMinimumModificationTime (the last copy is served, but it is not what was asked for).
func (r *ironicReconciler) arch(a agentArch, spec v1alpha1.IronicImageCacheSpec) (v1alpha1.AgentArchitecture, bool) {
	cfg := icconfig.FileSet{Set: a.set, URL: a.source, RefreshInterval: agentRefreshPeriod,
		Extract: []icconfig.Extract{{From: "*.kernel", To: a.kernel}, {From: "*.initramfs", To: a.initramfs}}}
	if spec.AgentMinimumModificationTime != nil {
		cfg.MinimumModificationTime = spec.AgentMinimumModificationTime.Time
	}
	as := v1alpha1.AgentArchitecture{Architecture: a.arch}
	if err := r.deps.Files.Ensure(cfg); err != nil {
		as.State, as.Message = v1alpha1.StateFailed, err.Error()
		return as, false
	}
	fs, _ := r.deps.Files.Status(a.set)
	as.State, as.Message = fileSetState(fs.State), fs.Message
	if fs.OlderThanMinimum {
		as.Message = withOlderThanMinimum(as.Message, a.source, "agentMinimumModificationTime")
	}
	for _, f := range fs.Files {
		lm := timePtr(metav1.NewTime(f.LastModified))
		switch f.Name {
		case a.kernel:
			as.KernelURL, as.KernelDigest, as.LastModified = r.fileURL(a.set, f.Name), f.Digest, lm
		case a.initramfs:
			as.InitramfsURL, as.InitramfsDigest = r.fileURL(a.set, f.Name), f.Digest
		}
	}
	return as, fs.OlderThanMinimum
}

func (r *ironicReconciler) emitEvents(iic *v1alpha1.IronicImageCache, old, st *v1alpha1.IronicImageCacheStatus) {
	for _, a := range st.Architectures {
		before := ""
		for _, p := range old.Architectures {
			if p.Architecture == a.Architecture {
				before = p.State
			}
		}
		if before == a.State && (a.State != v1alpha1.StateCached || sameDigests(old, a)) {
			continue
		}
		switch a.State {
		case v1alpha1.StateCached:
			r.events.Eventf(iic, corev1.EventTypeNormal, "Fetched", "agent for %s served at %s (kernel %s)", a.Architecture, a.KernelURL, a.KernelDigest)
		case v1alpha1.StateStale:
			r.events.Eventf(iic, corev1.EventTypeWarning, "Stale", "agent for %s: %s", a.Architecture, a.Message)
		case v1alpha1.StateFailed:
			r.events.Eventf(iic, corev1.EventTypeWarning, "Failed", "agent for %s: %s", a.Architecture, a.Message)
		}
	}
}

func sameDigests(old *v1alpha1.IronicImageCacheStatus, a v1alpha1.AgentArchitecture) bool {
	for _, p := range old.Architectures {
		if p.Architecture == a.Architecture {
			return p.KernelDigest == a.KernelDigest && p.InitramfsDigest == a.InitramfsDigest
		}
	}
	return false
}
