package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ImageSpec is an image to keep cached and pinned.
type ImageSpec struct {
	// Ref is the image reference, as a client would pull it: docker.io/library/nginx:1.27,
	// registry.example.com/team/app@sha256:<64 hex>, or nginx:1.27 (the default upstream). Its registry must be
	// one of imagecache's upstreams (by name, alias or URL host). The pattern is the OCI reference grammar
	// (lowercase registry host and repository, a tag or a sha256/sha512 digest of the right length), so a
	// typo is refused by kubectl rather than reported later in status.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*(:[0-9]+)?/)?[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[a-f0-9]{64}|@sha512:[a-f0-9]{128})?$`
	Ref string `json:"ref"`
	// PullPolicy says how fresh the cached tag must be: Always (checked on every refresh and pull),
	// IfNotPresent (fetched once), Never (only pinned if already cached). Default: the server's policy.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	PullPolicy string `json:"pullPolicy,omitempty"`
	// Platforms limits a multi-platform image to these os/arch[/variant] entries, e.g. linux/amd64.
	// Default: every platform of the index.
	// +optional
	Platforms []string `json:"platforms,omitempty"`
}

// FileSetSpec is a set of files to keep cached and served at /files/<set>/<file> (the config file's
// files: entries).
type FileSetSpec struct {
	// Name of the set; it is served as /files/<namespace>_<resource>_<name>/.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// URL is an http(s):// download, or an oci:// artifact in one of the upstreams.
	// +kubebuilder:validation:Pattern=`^(https?|oci)://`
	URL string `json:"url"`
	// SHA256 of the download (64 hex digits).
	// +kubebuilder:validation:Pattern=`^[a-fA-F0-9]{64}$`
	// +optional
	SHA256 string `json:"sha256,omitempty"`
	// ChecksumURL is a sha256sum-format file naming the download's checksum.
	// +optional
	ChecksumURL string `json:"checksumURL,omitempty"`
	// Extract publishes tarball members (or artifact layers) under new names.
	// +optional
	Extract []ExtractRule `json:"extract,omitempty"`
	// MinimumModificationTime forces a download when the cached copy is older.
	// +optional
	MinimumModificationTime *metav1.Time `json:"minimumModificationTime,omitempty"`
	// Architecture picks the manifest of an oci:// image index (amd64/x86_64, arm64/aarch64).
	// +optional
	Architecture string `json:"architecture,omitempty"`
}

// ImageCacheSpec declares images and files to keep cached, pinned and fresh.
// +kubebuilder:validation:XValidation:rule="(has(self.images) ? size(self.images) : 0) + (has(self.files) ? size(self.files) : 0) > 0",message="declare at least one image or file set"
type ImageCacheSpec struct {
	// +optional
	// +listType=map
	// +listMapKey=ref
	Images []ImageSpec `json:"images"`
	// +optional
	// +listType=map
	// +listMapKey=name
	Files []FileSetSpec `json:"files"`
	// PullSecrets are kubernetes.io/dockerconfigjson Secrets in the same namespace, used for these images.
	// +optional
	PullSecrets []corev1.LocalObjectReference `json:"pullSecrets,omitempty"`
	// RefreshInterval is how often images and files are checked again (default 1h, at least 10s: every
	// check costs each image an upstream request).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="refreshInterval must be at least 10s"
	// +optional
	RefreshInterval *metav1.Duration `json:"refreshInterval,omitempty"`
}

// ImageStatus is what is cached for one image.
type ImageStatus struct {
	Ref       string       `json:"ref"`
	Digest    string       `json:"digest,omitempty"`
	Size      int64        `json:"size,omitempty"`
	LastCheck *metav1.Time `json:"lastCheck,omitempty"`
	// State is Cached, Stale, Fetching or Failed.
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
}

// FileSetStatus is what is served for one file set.
type FileSetStatus struct {
	Name    string       `json:"name"`
	URL     string       `json:"url"` // the set's directory on imagecache
	State   string       `json:"state"`
	Message string       `json:"message,omitempty"`
	Files   []ServedFile `json:"files,omitempty"`
}

// ImageCacheStatus is observed state.
type ImageCacheStatus struct {
	ObservedGeneration int64           `json:"observedGeneration,omitempty"`
	Images             []ImageStatus   `json:"images,omitempty"`
	Files              []FileSetStatus `json:"files,omitempty"`
	// CachedImages is "<cached>/<declared>", for kubectl get.
	CachedImages string `json:"cachedImages,omitempty"`
	// Size is the bytes of everything cached for this resource, in human units.
	Size       string             `json:"size,omitempty"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ImageCache keeps images and files cached, pinned (never evicted) and fresh, and reports where they are
// served.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ic,categories=imagecache
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Images",type=string,JSONPath=`.status.cachedImages`
// +kubebuilder:printcolumn:name="Size",type=string,JSONPath=`.status.size`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ImageCache struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec declares the images and files to keep cached, pinned and fresh (required: a resource without one
	// would declare nothing).
	// +required
	Spec   ImageCacheSpec   `json:"spec"`
	Status ImageCacheStatus `json:"status,omitempty"`
}

// ImageCacheList is a list of ImageCache.
// +kubebuilder:object:root=true
type ImageCacheList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ImageCache `json:"items"`
}

func init() { SchemeBuilder.Register(&ImageCache{}, &ImageCacheList{}) }
