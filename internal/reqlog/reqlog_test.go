package reqlog

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

func TestEveryLineOfARequestCarriesItsID(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(Handler{slog.NewJSONHandler(&buf, nil)}).With("component", "cache")
	ctx := WithID(context.Background(), "abc123")
	log.InfoContext(ctx, "fetched blob")
	log.WarnContext(context.WithoutCancel(ctx), "from a detached download")
	log.Info("no request")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if !strings.Contains(lines[0], `"request":"abc123"`) || !strings.Contains(lines[1], `"request":"abc123"`) || strings.Contains(lines[2], `"request":`) {
		t.Fatalf("lines:\n%s", buf.String())
	}
	if !strings.Contains(lines[0], `"component":"cache"`) {
		t.Fatal("attributes added with With were lost")
	}
}
