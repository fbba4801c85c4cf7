package files

import "imagecache.io/imagecache/internal/store"

// storeSink writes files into the content store. What it writes is content-addressed and verified but
// referenced by nothing until the set version naming it is published; written lists it all, so that what
// is not published can be removed.
type storeSink struct {
	st      *store.Store
	written []string
}

func (s *storeSink) Create(_ string, size int64) (FileWriter, error) {
	w, err := s.st.NewWriter("", size)
	if err != nil {
		return nil, err
	}
	return storeFile{w: w, sink: s}, nil
}

type storeFile struct {
	w    *store.Writer
	sink *storeSink
}

func (f storeFile) Write(p []byte) (int, error) { return f.w.Write(p) }

func (f storeFile) Close() (string, int64, error) {
	if err := f.w.Commit(""); err != nil {
		return "", 0, err
	}
	f.sink.written = append(f.sink.written, f.w.Digest())
	return f.w.Digest(), f.w.Written(), nil
}

func (f storeFile) Abort() { f.w.Abort() }
