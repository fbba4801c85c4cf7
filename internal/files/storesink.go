package files

import "imagecache.io/imagecache/internal/store"

// storeSink writes files into the content store. What it writes is content-addressed and verified but
// referenced by nothing until the set version naming it is published.
type storeSink struct{ st *store.Store }

func (s storeSink) Create(_ string, size int64) (FileWriter, error) {
	w, err := s.st.NewWriter("", size)
	if err != nil {
		return nil, err
	}
	return storeFile{w}, nil
}

type storeFile struct{ w *store.Writer }

func (f storeFile) Write(p []byte) (int, error) { return f.w.Write(p) }

func (f storeFile) Close() (string, int64, error) {
	if err := f.w.Commit(""); err != nil {
		return "", 0, err
	}
	return f.w.Digest(), f.w.Written(), nil
}

func (f storeFile) Abort() { f.w.Abort() }
