package config

import "fmt"

// Error is one problem in a config file. It names the file, the line and the
// key path, because an operator whose `serve` refuses to start needs to know
// exactly where to look.
type Error struct {
	Source string // the file name, or whatever Parse was given
	Line   int    // 1-based; 0 when unknown
	Path   string // key path such as "policies[0].pull"; "" for the whole document
	Err    error
}

func (e *Error) Error() string {
	where := e.Source
	if e.Line > 0 {
		where = fmt.Sprintf("%s:%d", e.Source, e.Line)
	}
	if e.Path == "" {
		return fmt.Sprintf("%s: %v", where, e.Err)
	}
	return fmt.Sprintf("%s: %s: %v", where, e.Path, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }
