package progress

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

// fakeClock advances by step each time it is read.
func fakeClock(step time.Duration) func() time.Time {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time {
		now = now.Add(step)
		return now
	}
}

func lines(s string) []string {
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

func TestPlainKnownTotal(t *testing.T) {
	var out bytes.Buffer
	b := New(&out, "ipa.tar.gz")
	b.now = fakeClock(time.Millisecond) // 10,000 updates in 10 s: the 5 s rule may add a line or two
	const total = 10_000 * 1024
	for i := int64(1); i <= 10_000; i++ {
		b.Update(i*1024, total)
	}
	b.Finish()
	got := lines(out.String())
	if len(got) < 3 || len(got) > 14 {
		t.Fatalf("%d lines for 10,000 updates, want 3..14 (each 10%%, each 5 s, a final line):\n%s", len(got), out.String())
	}
	if strings.Contains(out.String(), "\r") {
		t.Error("a plain writer got a carriage return")
	}
	if !strings.Contains(got[len(got)-2], "100%") {
		t.Errorf("the last progress line is %q, want 100%%", got[len(got)-2])
	}
	if last := got[len(got)-1]; !strings.HasPrefix(last, "ipa.tar.gz: done, 9.8 MiB in 10s") {
		t.Errorf("final line %q", last)
	}
}

func TestPlainUnknownTotal(t *testing.T) {
	var out bytes.Buffer
	b := New(&out, "x")
	b.now = fakeClock(0) // no time passes: only the final line
	for i := int64(1); i <= 10_000; i++ {
		b.Update(i, -1)
	}
	b.Finish()
	b.Finish()
	if got := lines(out.String()); len(got) != 1 {
		t.Fatalf("got %d lines, want only the final one:\n%s", len(got), out.String())
	}

	out.Reset()
	b = New(&out, "x")
	b.now = fakeClock(time.Second) // a line every 5 s, counted from the first update
	for i := int64(1); i <= 20; i++ {
		b.Update(i<<20, -1)
	}
	if got := lines(out.String()); len(got) != 3 || got[0] != "x 6.0 MiB  1.2 MiB/s" {
		t.Fatalf("20 s without a total: %d lines, want 3 starting with \"x 6.0 MiB  1.2 MiB/s\":\n%s", len(got), out.String())
	}
}

func TestTerminalRedraw(t *testing.T) {
	var out bytes.Buffer
	b := New(&out, "kernel")
	b.tty = true
	b.now = fakeClock(time.Millisecond)
	for i := int64(1); i <= 10_000; i++ {
		b.Update(i*100, 1_000_000)
	}
	b.Finish()
	s := out.String()
	if n := strings.Count(s, "\r"); n < 50 || n > 110 {
		t.Errorf("%d redraws in 10 s, want about 100 (at most ~10 a second)", n)
	}
	if strings.Count(s, "\n") != 1 || !strings.HasSuffix(s, "\n") {
		t.Errorf("want exactly one newline, at the end")
	}
	final := s[strings.LastIndex(s, "\r")+1:]
	if !strings.HasPrefix(final, "kernel ["+strings.Repeat("=", barWidth)+"] 100%  976.6 KiB / 976.6 KiB") {
		t.Errorf("final redraw %q", final)
	}
}

func TestTerminalShorterLineIsBlanked(t *testing.T) {
	var out bytes.Buffer
	b := New(&out, "f")
	b.tty = true
	b.now = fakeClock(time.Second)
	b.Update(5<<30, -1)
	b.Update(1, -1)
	draws := strings.Split(out.String(), "\r")
	if len(draws[1]) > len(draws[2]) {
		t.Errorf("a shorter line does not cover the longer one: %q then %q", draws[1], draws[2])
	}
}

func TestIsTerminal(t *testing.T) {
	if isTerminal(&bytes.Buffer{}) {
		t.Error("a buffer is a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Error("a regular file is a terminal")
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 12_900_000: "12.3 MiB", 3 << 30: "3.0 GiB", 5 << 40: "5.0 TiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestBar(t *testing.T) {
	for _, c := range []struct {
		done, total int64
		want        string
	}{
		{0, 10, "[>" + strings.Repeat(" ", barWidth-1) + "]"},
		{5, 10, "[" + strings.Repeat("=", barWidth/2) + ">" + strings.Repeat(" ", barWidth/2-1) + "]"},
		{10, 10, "[" + strings.Repeat("=", barWidth) + "]"},
		{20, 10, "[" + strings.Repeat("=", barWidth) + "]"},
	} {
		if got := bar(c.done, c.total); got != c.want {
			t.Errorf("bar(%d, %d) = %q, want %q", c.done, c.total, got, c.want)
		}
	}
}
