package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Condition types used by both resources.
const (
	// ConditionReady is True when everything the resource asks for is cached and served.
	ConditionReady = "Ready"
	// ConditionDegraded is True when something could not be fetched or checked (the last good copy, if any,
	// is still served).
	ConditionDegraded = "Degraded"
)

// Entry states, in status.
const (
	StateCached   = "Cached"
	StateStale    = "Stale"
	StateFetching = "Fetching"
	StateFailed   = "Failed"
)

// ExtractRule publishes the tarball member (or OCI layer title) matching From as To.
type ExtractRule struct {
	// From is a glob on the member's name, e.g. "*.kernel".
	// +kubebuilder:validation:MinLength=1
	From string `json:"from"`
	// To is the published file name.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._~-]+$`
	To string `json:"to"`
}

// ServedFile is one file as served by imagecache.
type ServedFile struct {
	Name         string       `json:"name"`
	URL          string       `json:"url"`
	Digest       string       `json:"digest,omitempty"`
	Size         int64        `json:"size,omitempty"`
	LastModified *metav1.Time `json:"lastModified,omitempty"`
}
