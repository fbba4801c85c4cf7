package admin

import (
	"errors"
	"net/http"
	"slices"
	"time"

	"imagecache.io/imagecache/internal/eviction"
	"imagecache.io/imagecache/internal/reference"
	"imagecache.io/imagecache/internal/store"
)

// Image is one cached image as GET /api/v1/images lists it.
type Image struct {
	Name         string      `json:"name"`         // upstream/repository (the first, when pulled under several)
	Repositories []string    `json:"repositories"` // every upstream/repository it was pulled under
	Tags         []string    `json:"tags"`         // tag names pointing at it
	References   []string    `json:"references"`   // the same as upstream/repository:tag
	Digest       string      `json:"digest"`
	MediaType    string      `json:"mediaType"`
	Size         int64       `json:"size"`       // bytes of every object of the image, shared or not
	UniqueSize   int64       `json:"uniqueSize"` // bytes no other image uses: about what a purge frees
	Objects      int         `json:"objects"`
	LastUse      time.Time   `json:"lastUse"`
	Uses         int64       `json:"uses"` // manifest requests served for it (by tag or digest), since it was stored
	Pinned       bool        `json:"pinned"`
	PinnedBy     []store.Pin `json:"pinnedBy,omitempty"`
	State        string      `json:"state"`   // cached (pullable with the upstream down) or partial
	Missing      int         `json:"missing"` // objects its manifests name that are not stored
}

// Images serves GET /api/v1/images[?name=<upstream/repository>] and DELETE /api/v1/images?ref=<reference>.
func Images(e *eviction.Evictor, router *reference.Router) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			listImages(w, r, e, router)
		case http.MethodDelete:
			purgeImage(w, r, e, router)
		default:
			w.Header().Set("Allow", "GET, DELETE")
			writeError(w, http.StatusMethodNotAllowed, "use GET /api/v1/images[?name=<upstream/repository>] or DELETE /api/v1/images?ref=<reference>")
		}
	}
}

func listImages(w http.ResponseWriter, r *http.Request, e *eviction.Evictor, router *reference.Router) {
	want := ""
	if name := r.URL.Query().Get("name"); name != "" {
		up, repo, _, err := router.ResolveImage(name)
		if err != nil {
			writeRefError(w, err)
			return
		}
		want = up + "/" + repo
	}
	units, err := e.Images()
	if err != nil {
		writeError(w, http.StatusInternalServerError, "list images: "+err.Error())
		return
	}
	out := []Image{}
	for _, u := range units {
		img := imageOf(u)
		if want == "" || slices.Contains(img.Repositories, want) {
			out = append(out, img)
		}
	}
	writeJSON(w, http.StatusOK, map[string][]Image{"images": out})
}

func imageOf(u eviction.Image) Image {
	img := Image{Repositories: u.Repositories, Tags: []string{}, References: []string{}, Digest: u.Digest,
		MediaType: u.MediaType, Size: u.Size, UniqueSize: u.UniqueSize, Objects: u.Objects, LastUse: u.LastUse, Uses: u.Uses,
		Pinned: len(u.PinnedBy) > 0, PinnedBy: u.PinnedBy, State: "cached", Missing: u.Missing}
	if img.Repositories == nil {
		img.Repositories = []string{}
	}
	if len(img.Repositories) > 0 {
		img.Name = img.Repositories[0]
	}
	for _, t := range u.Tags {
		if !slices.Contains(img.Tags, t.Tag) {
			img.Tags = append(img.Tags, t.Tag)
		}
		img.References = append(img.References, t.Upstream+"/"+t.Repository+":"+t.Tag)
	}
	slices.Sort(img.Tags)
	slices.Sort(img.References)
	if u.Missing > 0 {
		img.State = "partial"
	}
	return img
}

func purgeImage(w http.ResponseWriter, r *http.Request, e *eviction.Evictor, router *reference.Router) {
	ref := r.URL.Query().Get("ref")
	if ref == "" {
		writeError(w, http.StatusBadRequest, "name the image to purge: DELETE /api/v1/images?ref=<upstream/repository:tag or @digest>")
		return
	}
	up, repo, tagOrDigest, err := router.ResolveImage(ref)
	if err != nil {
		writeRefError(w, err)
		return
	}
	purged, err := e.Purge(up, repo, tagOrDigest)
	var pinned *eviction.PinnedError
	var partOf *eviction.PartOfError
	switch {
	case errors.Is(err, eviction.ErrNotCached):
		writeError(w, http.StatusNotFound, err.Error()+"; nothing was removed (GET /api/v1/images lists what is cached)")
	case errors.As(err, &pinned), errors.As(err, &partOf):
		writeError(w, http.StatusConflict, err.Error())
	case err != nil:
		writeError(w, http.StatusInternalServerError, err.Error())
	default:
		writeJSON(w, http.StatusOK, purged)
	}
}

// writeRefError answers a reference that does not parse (400) or names no upstream (404).
func writeRefError(w http.ResponseWriter, err error) {
	var re *reference.Error
	if errors.As(err, &re) && re.Code == reference.CodeNameUnknown {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	writeError(w, http.StatusBadRequest, err.Error())
}
