// Package reqlog puts a request's id on every log line written while serving it: the server stores the id in
// the request's context, and Handler adds it to each record logged with that context (log.InfoContext and
// friends), however deep in the cache the line is written.
package reqlog

import (
	"context"
	"log/slog"
)

type idKey struct{}

// WithID returns ctx carrying the request id.
func WithID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, idKey{}, id)
}

// ID is the request id carried by ctx, or "".
func ID(ctx context.Context) string {
	id, _ := ctx.Value(idKey{}).(string)
	return id
}

// Handler adds the attribute request=<id> to records logged with a request's context.
type Handler struct{ slog.Handler }

// Handle implements slog.Handler.
func (h Handler) Handle(ctx context.Context, r slog.Record) error {
	if id := ID(ctx); id != "" {
		r.AddAttrs(slog.String("request", id))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return Handler{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h Handler) WithGroup(name string) slog.Handler { return Handler{h.Handler.WithGroup(name)} }
