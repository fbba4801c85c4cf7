package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// IronicImageCacheSpec has the fields metal3 proposed for caching the Ironic Python Agent (IPA), plus
// agentFlavor and architectures.
type IronicImageCacheSpec struct {
	// AgentBranch is the IPA branch; "/" becomes "-" in the file name (stable/2025.1 -> stable-2025.1).
	// +kubebuilder:default=master
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._/-]+$`
	// +kubebuilder:validation:MaxLength=128
	// +optional
	AgentBranch string `json:"agentBranch,omitempty"`
	// AgentDownloadURL is where the IPA tarballs are.
	// +kubebuilder:default="https://tarballs.opendev.org/openstack/ironic-python-agent/dib"
	// +kubebuilder:validation:Pattern=`^https?://`
	// +optional
	AgentDownloadURL string `json:"agentDownloadURL,omitempty"`
	// AgentDownloaderImage is accepted so that existing manifests apply, but not used: imagecache downloads
	// the agent itself (the status says so).
	// +optional
	AgentDownloaderImage string `json:"agentDownloaderImage,omitempty"`
	// AgentMinimumModificationTime: a cached agent older than this is downloaded again.
	// +optional
	AgentMinimumModificationTime *metav1.Time `json:"agentMinimumModificationTime,omitempty"`
	// AgentFlavor is the IPA image flavor.
	// +kubebuilder:default=centos9
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+$`
	// +optional
	AgentFlavor string `json:"agentFlavor,omitempty"`
	// Architectures to serve. x86_64 is the plain ipa-<flavor>-<branch>.tar.gz published as
	// ironic-python-agent.kernel/.initramfs; any other architecture A comes from
	// ipa-<flavor>-<branch>_A.tar.gz and is published as ironic-python-agent_A.kernel/.initramfs.
	// Default: [x86_64].
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9_]+$`
	// +listType=set
	// +optional
	Architectures []string `json:"architectures,omitempty"`
}

// AgentArchitecture is what is served for one architecture.
type AgentArchitecture struct {
	Architecture    string       `json:"architecture"`
	KernelURL       string       `json:"kernelURL,omitempty"`
	InitramfsURL    string       `json:"initramfsURL,omitempty"`
	KernelDigest    string       `json:"kernelDigest,omitempty"`
	InitramfsDigest string       `json:"initramfsDigest,omitempty"`
	LastModified    *metav1.Time `json:"lastModified,omitempty"`
	State           string       `json:"state"`
	Message         string       `json:"message,omitempty"`
}

// IronicImageCacheStatus says where Ironic finds the agent.
type IronicImageCacheStatus struct {
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// KernelURL and InitramfsURL are the first architecture's (x86_64 unless only others are asked for):
	// set Ironic's deploy_kernel and deploy_ramdisk to them.
	KernelURL     string              `json:"kernelURL,omitempty"`
	InitramfsURL  string              `json:"initramfsURL,omitempty"`
	LastModified  *metav1.Time        `json:"lastModified,omitempty"`
	Architectures []AgentArchitecture `json:"architectures,omitempty"`
	// DownloaderImage explains that spec.agentDownloaderImage is not used.
	DownloaderImage string             `json:"downloaderImage,omitempty"`
	Conditions      []metav1.Condition `json:"conditions,omitempty"`
}

// IronicImageCache downloads the Ironic Python Agent once, serves its kernel and initramfs over HTTP and keeps
// them fresh, for every Ironic in the cluster.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=iic,categories=imagecache
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Kernel",type=string,JSONPath=`.status.kernelURL`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IronicImageCache struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   IronicImageCacheSpec   `json:"spec,omitempty"`
	Status IronicImageCacheStatus `json:"status,omitempty"`
}

// IronicImageCacheList is a list of IronicImageCache.
// +kubebuilder:object:root=true
type IronicImageCacheList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IronicImageCache `json:"items"`
}

func init() { SchemeBuilder.Register(&IronicImageCache{}, &IronicImageCacheList{}) }
