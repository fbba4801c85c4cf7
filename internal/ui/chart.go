package ui

import (
	"fmt"
	"math"

	"imagecache.io/imagecache/internal/stats"
)

// A chart is per-minute stacked bars drawn as SVG on the server: 60 minutes, oldest on the left. The
// template only places the rectangles computed here.
type chart struct {
	Width, Height float64 // the plot area, in viewBox units
	Bars          []bar
	Max           string // the top of the scale, as a label
	Series        []series
	Empty         bool
}

type bar struct {
	X, W  float64
	Parts []part
	Title string // tooltip: the minute and its figures
}

type part struct {
	Y, H  float64
	Class string
}

type series struct{ Name, Class, Total string }

const (
	chartWidth  = 600
	chartHeight = 110
	slot        = chartWidth / 60
)

type layer struct {
	name, class string
	value       func(stats.Minute) int64
	label       func(int64) string
}

func requestChart(minutes []stats.Minute) chart {
	n := func(v int64) string { return Num(v) }
	return stacked(minutes, n, false, []layer{
		{"hits", "hit", func(m stats.Minute) int64 { return m.Hits }, n},
		{"revalidated", "reval", func(m stats.Minute) int64 { return m.Revalidated }, n},
		{"stale", "stale", func(m stats.Minute) int64 { return m.Stale }, n},
		{"misses", "miss", func(m stats.Minute) int64 { return m.Misses }, n},
		{"errors", "err", func(m stats.Minute) int64 { return m.Errors }, n},
	})
}

func bytesChart(minutes []stats.Minute) chart {
	return stacked(minutes, Bytes, true, []layer{
		{"from cache", "hit", func(m stats.Minute) int64 { return m.BytesFromCache }, Bytes},
		{"from upstream", "miss", func(m stats.Minute) int64 { return m.BytesFromUpstream }, Bytes},
	})
}

// stacked lays out one bar per minute with the layers stacked bottom up, on a linear scale whose top is
// the busiest minute rounded up to a round number.
func stacked(minutes []stats.Minute, label func(int64) string, binary bool, layers []layer) chart {
	c := chart{Width: chartWidth, Height: chartHeight}
	var top int64
	totals := make([]int64, len(layers))
	for _, m := range minutes {
		var sum int64
		for i, l := range layers {
			v := l.value(m)
			sum += v
			totals[i] += v
		}
		top = max(top, sum)
	}
	for i, l := range layers {
		c.Series = append(c.Series, series{Name: l.name, Class: l.class, Total: l.label(totals[i])})
	}
	if top == 0 {
		c.Empty, c.Max = true, label(0)
		return c
	}
	scale := roundUp(top, binary)
	c.Max = label(scale)
	for i, m := range minutes {
		b := bar{X: float64(i)*slot + 1, W: slot - 2}
		y := float64(chartHeight)
		title := m.Start.UTC().Format("15:04") + " UTC"
		for _, l := range layers {
			v := l.value(m)
			if v == 0 {
				continue
			}
			// At least one unit high, so that a single request in a busy hour stays visible.
			h := max(1, float64(v)/float64(scale)*chartHeight)
			h = min(h, y) // the minimum heights must not push the stack out of the plot
			y -= h
			b.Parts = append(b.Parts, part{Y: y, H: h, Class: l.class})
			title += fmt.Sprintf(" · %s %s", l.label(v), l.name)
		}
		b.Title = title
		c.Bars = append(c.Bars, b)
	}
	return c
}

// roundUp gives 1, 2 or 5 times a power of ten (of 1024 for bytes, which are labelled in binary units), at
// least v.
func roundUp(v int64, binary bool) int64 {
	base := 10.0
	if binary && v >= 1024 {
		base = 1024
	}
	p := math.Pow(base, math.Floor(math.Log(float64(v))/math.Log(base)))
	for _, m := range []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000} {
		if m*p >= float64(v) {
			return int64(m * p)
		}
	}
	return v
}
