// Package progress reports how a long download is going: a bar redrawn in place on a terminal, a few plain
// lines in a log (a pod's, say), where a redrawn line would be thousands of lines of noise.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

const (
	redrawEvery = 100 * time.Millisecond // a terminal: often enough to look live, rarely enough to cost nothing
	logEvery    = 5 * time.Second        // a log: a line at least this far apart, unless another 10% is done
	barWidth    = 30
)

// Bar reports the progress of one transfer. It is not safe for concurrent use: a transfer reports from the
// goroutine that reads it.
type Bar struct {
	w     io.Writer
	label string
	tty   bool
	now   func() time.Time // replaced in tests

	start      time.Time
	last       time.Time // when the last line was drawn or printed
	lastDecile int64     // the 10% step of the last plain line; -1 before the first
	lineLen    int       // the length of the line on the terminal, to blank out what a shorter line leaves
	done       int64
	total      int64
	finished   bool
}

// New returns a bar writing to w. On a terminal it redraws one line; anywhere else it prints plain lines.
func New(w io.Writer, label string) *Bar {
	return &Bar{w: w, label: label, tty: isTerminal(w), now: time.Now, total: -1, lastDecile: -1}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Update records that done of total bytes are transferred; total is -1 when unknown.
func (b *Bar) Update(done, total int64) {
	now := b.now()
	if b.start.IsZero() {
		b.start, b.last = now, now
	}
	b.done, b.total = done, total
	if b.tty {
		if b.lineLen == 0 || now.Sub(b.last) >= redrawEvery {
			b.draw(now)
		}
		return
	}
	decile := b.decile()
	if decile > b.lastDecile || now.Sub(b.last) >= logEvery {
		b.print(now, decile)
	}
}

// Finish prints the final state; calling it again does nothing.
func (b *Bar) Finish() {
	if b.finished {
		return
	}
	b.finished = true
	now := b.now()
	if b.start.IsZero() {
		b.start = now
	}
	if b.tty {
		b.draw(now)
		fmt.Fprintln(b.w)
		return
	}
	fmt.Fprintf(b.w, "%s: done, %s in %s (%s)\n", b.label, Bytes(b.done), now.Sub(b.start).Round(100*time.Millisecond), b.rate(now))
}

// decile is the 10% step reached, or -1 when the total is unknown.
func (b *Bar) decile() int64 {
	if b.total <= 0 {
		return -1
	}
	return min(b.done*10/b.total, 10)
}

func (b *Bar) print(now time.Time, decile int64) {
	b.last, b.lastDecile = now, decile
	fmt.Fprintln(b.w, b.line(now, false))
}

func (b *Bar) draw(now time.Time) {
	b.last = now
	line := b.line(now, true)
	pad := max(b.lineLen-len(line), 0)
	b.lineLen = len(line)
	fmt.Fprint(b.w, "\r"+line+strings.Repeat(" ", pad))
}

// line is "label [=====>    ]  45%  12.3 MiB / 27.0 MiB  5.6 MiB/s"; without a known total, no bar or percent.
func (b *Bar) line(now time.Time, withBar bool) string {
	var s strings.Builder
	s.WriteString(b.label)
	if b.total > 0 {
		pct := min(b.done*100/b.total, 100)
		if withBar {
			s.WriteString(" " + bar(b.done, b.total))
		}
		fmt.Fprintf(&s, " %3d%%  %s / %s", pct, Bytes(b.done), Bytes(b.total))
	} else {
		fmt.Fprintf(&s, " %s", Bytes(b.done))
	}
	fmt.Fprintf(&s, "  %s", b.rate(now))
	return s.String()
}

func bar(done, total int64) string {
	filled := int(min(done*barWidth/total, barWidth))
	head := ""
	if filled < barWidth {
		head = ">"
	}
	return "[" + strings.Repeat("=", filled) + head + strings.Repeat(" ", max(barWidth-filled-len(head), 0)) + "]"
}

func (b *Bar) rate(now time.Time) string {
	secs := now.Sub(b.start).Seconds()
	if secs <= 0 {
		return "-/s"
	}
	return Bytes(int64(float64(b.done)/secs)) + "/s"
}

// Bytes formats n in binary units: "512 B", "1.5 KiB", "12.3 MiB", "1.2 GiB".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	value, suffix := float64(n)/unit, "KiB"
	for _, next := range []string{"MiB", "GiB", "TiB"} {
		if value < unit {
			break
		}
		value, suffix = value/unit, next
	}
	return fmt.Sprintf("%.1f %s", value, suffix)
}
