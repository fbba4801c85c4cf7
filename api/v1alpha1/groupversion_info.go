// Package v1alpha1 holds the imagecache.io/v1alpha1 custom resources: ImageCache (images and files a
// cluster wants cached, pinned and fresh) and IronicImageCache (metal3's Ironic Python Agent, served over HTTP).
// +kubebuilder:object:generate=true
// +groupName=imagecache.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of these resources.
	GroupVersion = schema.GroupVersion{Group: "imagecache.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
