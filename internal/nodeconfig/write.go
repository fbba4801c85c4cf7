package nodeconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Write writes each file under dir atomically (temp file in the same directory, fsync, rename), so a
// runtime reading the directory at any moment sees the old file or the new one, never half of one.
func Write(dir string, files []File) error {
	for _, f := range files {
		if err := writeFile(filepath.Join(dir, filepath.FromSlash(f.Path)), f.Data); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(dest string, data []byte) (err error) {
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", dest, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", dest, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", dest, err)
	}
	// CreateTemp makes 0600; runtimes run as root, but people read these files too.
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("write %s: %w", dest, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", dest, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", dest, err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return fmt.Errorf("write %s: %w", dest, err)
	}
	return nil
}

// RemoveOwn removes dir/<path> if an earlier run wrote it (it starts with Marker), so that a registry
// newly excluded with --skip stops being mirrored on nodes that already had a file for it. A file someone
// else wrote is left alone; removed reports whether there was one of ours.
func RemoveOwn(dir, path string) (removed bool, err error) {
	p := filepath.Join(dir, filepath.FromSlash(path))
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", p, err)
	}
	if !bytes.HasPrefix(data, []byte(Marker)) {
		return false, nil
	}
	if err := os.Remove(p); err != nil {
		return false, fmt.Errorf("remove %s: %w", p, err)
	}
	if d := filepath.Dir(p); d != filepath.Clean(dir) {
		_ = os.Remove(d) // the registry's directory, if now empty; an error means it is not
	}
	return true, nil
}
