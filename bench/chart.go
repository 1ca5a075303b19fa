package bench

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// WriteCharts draws the report's charts as PNG files beside the report:
// BASE-goals.png (each goal's figure against its limit), BASE-latency.png
// (warm command and stream latency beside their baselines) and
// BASE-fileops.png (file operations in a computer and on the host). It
// uses only the standard library, with a built-in 5x7 pixel font. The
// names of the files written are kept in r.Charts, for the report.
func (r *Report) WriteCharts(base string) error {
	charts := map[string]*chart{"goals": r.goalsChart()}
	if r.Runtime != nil {
		charts["latency"] = r.Runtime.latencyChart()
		charts["fileops"] = r.Runtime.fileOpsChart()
	}
	r.Charts = nil
	for _, name := range []string{"goals", "latency", "fileops"} {
		c := charts[name]
		if c == nil || len(c.rows) == 0 {
			continue
		}
		path := base + "-" + name + ".png"
		if err := c.write(path); err != nil {
			return fmt.Errorf("chart %s: %w", name, err)
		}
		r.Charts = append(r.Charts, filepath.Base(path))
	}
	return nil
}

var (
	green  = color.RGBA{0x2e, 0x9e, 0x4f, 0xff}
	red    = color.RGBA{0xd0, 0x3b, 0x2f, 0xff}
	grey   = color.RGBA{0x9a, 0xa0, 0xa6, 0xff}
	blue   = color.RGBA{0x2f, 0x6f, 0xd0, 0xff}
	sand   = color.RGBA{0xd8, 0xb0, 0x4a, 0xff}
	black  = color.RGBA{0x20, 0x20, 0x20, 0xff}
	rule   = color.RGBA{0x60, 0x60, 0x60, 0xff}
	canvas = color.RGBA{0xff, 0xff, 0xff, 0xff}
)

// goalsChart shows each goal's figure divided by its limit (the goal
// times the baseline, or the absolute goal): under 1 is met.
func (r *Report) goalsChart() *chart {
	c := &chart{title: "bothy goals: figure / limit (under 1 = met)", marker: 1}
	for _, g := range r.Goals {
		limit := 0.0
		if _, err := fmt.Sscanf(strings.TrimPrefix(strings.TrimPrefix(g.Goal, "≤ "), "< "), "%g", &limit); err != nil || limit == 0 {
			continue
		}
		if strings.HasSuffix(g.Goal, "x") {
			limit *= g.BaselineValue
		}
		if limit == 0 {
			continue
		}
		col, text := green, fmt.Sprintf("%s (goal %s)", value(g.Value, g.Unit), g.Goal)
		if !g.Met {
			col = red
		}
		c.rows = append(c.rows, chartRow{label: shorten(strings.ReplaceAll(g.Scenario, "`", ""), 44), bars: []chartBar{{g.Value / limit, col, text}}})
	}
	return c
}

// latencyChart shows p50 bars with the p99 in the text.
func (r *RuntimeReport) latencyChart() *chart {
	c := &chart{title: "latency in ms: p50 bar, p99 in brackets", legend: []chartBar{{0, grey, "baseline"}, {0, blue, "bothy"}}}
	for _, row := range [][2]string{
		{"baseline_exec_true", "fork/exec true"},
		{"baseline_bwrap_true", "plain bwrap true"},
		{"bothy_api_true", "bothy API true (warm)"},
		{"bothy_cli_true", "bothy CLI run true (warm)"},
		{"baseline_pipe_stream_latency", "line through a pipe"},
		{"bothy_stream_latency", "line through bothy SSE"},
	} {
		f := r.Figure(row[0])
		if len(f.Runs) == 0 {
			continue
		}
		col := blue
		if strings.HasPrefix(f.Name, "baseline") {
			col = grey
		}
		c.rows = append(c.rows, chartRow{label: row[1], bars: []chartBar{{f.Median, col, fmt.Sprintf("%.2f (%.2f)", f.Median, f.P99)}}})
	}
	return c
}

// fileOpsChart shows each file operation, and the npm install, on the
// host's ext4, on tmpfs and in a computer, each row to its own scale.
func (r *RuntimeReport) fileOpsChart() *chart {
	c := &chart{title: "file operations (ms) and npm install (s): host ext4, tmpfs, bothy (each row to its own scale)", perRow: true,
		legend: []chartBar{{0, grey, "host ext4"}, {0, sand, "host tmpfs"}, {0, blue, "bothy computer"}}}
	row := func(label, key string) {
		h, t, b := r.Figure("host_"+key), r.Figure("tmpfs_"+key), r.Figure("bothy_"+key)
		if len(h.Runs) == 0 || len(b.Runs) == 0 {
			return
		}
		bars := []chartBar{{h.Median, grey, fmt.Sprintf("%.1f", h.Median)}}
		if len(t.Runs) > 0 {
			bars = append(bars, chartBar{t.Median, sand, fmt.Sprintf("%.1f", t.Median)})
		}
		bars = append(bars, chartBar{b.Median, blue, fmt.Sprintf("%.1f  %.2fx ext4", b.Median, ratio(b.Median, h.Median))})
		c.rows = append(c.rows, chartRow{label: shorten(strings.ReplaceAll(label, "`", ""), 44), bars: bars})
	}
	for _, op := range FileOps {
		row(op.Label, op.Key)
	}
	if r.Npm != nil {
		row(fmt.Sprintf("npm ci, %s files (s)", thousands(r.Npm.Files)), "npm_ci")
	}
	return c
}

func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-2]) + ".."
	}
	return s
}

// chart is a horizontal bar chart: a label, then one or more bars per row.
type chart struct {
	title  string
	rows   []chartRow
	marker float64 // a vertical rule at this value, if not 0
	perRow bool    // scale each row to its own largest bar
	legend []chartBar
}

type chartRow struct {
	label string
	bars  []chartBar
}

type chartBar struct {
	value float64
	color color.RGBA
	text  string
}

// Layout, in pixels; text is the 5x7 font at scale 2.
const (
	scale   = 2
	advance = 6 * scale
	lineH   = 8 * scale
	barH    = 14
	margin  = 16
	barW    = 420
)

func (c *chart) write(path string) error {
	labelW := 0
	for _, r := range c.rows {
		labelW = max(labelW, len([]rune(r.label))*advance)
	}
	maxV := c.marker
	for _, r := range c.rows {
		for _, b := range r.bars {
			maxV = max(maxV, b.value)
		}
	}
	rowH := func(r chartRow) int { return len(r.bars)*(barH+2) + 8 }
	h := margin*2 + lineH + 10
	if len(c.legend) > 0 {
		h += lineH + 6
	}
	for _, r := range c.rows {
		h += rowH(r)
	}
	w := margin*2 + labelW + 12 + barW + 26*advance
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	fill(img, img.Bounds(), canvas)
	text(img, margin, margin, c.title, black)
	y := margin + lineH + 10
	if len(c.legend) > 0 {
		x := margin
		for _, l := range c.legend {
			fill(img, image.Rect(x, y, x+lineH, y+lineH), l.color)
			text(img, x+lineH+6, y+1, l.text, black)
			x += lineH + 6 + len(l.text)*advance + 24
		}
		y += lineH + 6
	}
	x0 := margin + labelW + 12
	if c.marker > 0 && maxV > 0 {
		// Under the bars and their text.
		mx := x0 + int(math.Round(c.marker/maxV*barW))
		fill(img, image.Rect(mx, y-4, mx+2, h-margin), rule)
	}
	for _, r := range c.rows {
		text(img, margin, y+(rowH(r)-8-lineH)/2, r.label, black)
		rowMax := maxV
		if c.perRow {
			rowMax = 0
			for _, b := range r.bars {
				rowMax = max(rowMax, b.value)
			}
		}
		by := y
		for _, b := range r.bars {
			n := 0
			if rowMax > 0 {
				n = int(math.Round(b.value / rowMax * barW))
			}
			fill(img, image.Rect(x0, by, x0+max(n, 1), by+barH), b.color)
			tx := x0 + n + 6
			fill(img, image.Rect(tx-3, by, tx+len([]rune(b.text))*advance, by+barH), canvas) // over the marker
			text(img, tx, by, b.text, black)
			by += barH + 2
		}
		y += rowH(r)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

// text draws s in capitals with the 5x7 font at scale 2.
func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	for _, ch := range strings.ToUpper(s) {
		g, ok := font[ch]
		if !ok {
			switch ch {
			case '≤':
				g = font['<']
			case '…':
				g = font['.']
			default:
				g = font['?']
			}
		}
		for row, bits := range g {
			for col := 0; col < 5; col++ {
				if bits&(0x10>>col) != 0 {
					fill(img, image.Rect(x+col*scale, y+row*scale, x+(col+1)*scale, y+(row+1)*scale), c)
				}
			}
		}
		x += advance
	}
}

// font is a 5x7 pixel font: seven rows of five bits, the top bit leftmost.
var font = map[rune][7]byte{
	' ': {}, '?': {0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04},
	'0': {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}, '1': {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E},
	'2': {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}, '3': {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E},
	'4': {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}, '5': {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E},
	'6': {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}, '7': {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08},
	'8': {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}, '9': {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C},
	'A': {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}, 'B': {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E},
	'C': {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}, 'D': {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C},
	'E': {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}, 'F': {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10},
	'G': {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}, 'H': {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11},
	'I': {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}, 'J': {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C},
	'K': {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}, 'L': {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F},
	'M': {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}, 'N': {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11},
	'O': {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}, 'P': {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10},
	'Q': {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}, 'R': {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11},
	'S': {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}, 'T': {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04},
	'U': {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}, 'V': {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04},
	'W': {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}, 'X': {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11},
	'Y': {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04}, 'Z': {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F},
	'.': {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}, ',': {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08},
	':': {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}, '-': {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00},
	'+': {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00}, '(': {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02},
	')': {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}, '/': {0x01, 0x01, 0x02, 0x04, 0x08, 0x10, 0x10},
	'%': {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}, '<': {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02},
	'>': {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08}, '=': {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00},
	'_': {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F}, '$': {0x04, 0x0F, 0x14, 0x0E, 0x05, 0x1E, 0x04},
	'|': {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}, '`': {0x08, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00},
	'\'': {0x04, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00}, '*': {0x00, 0x04, 0x15, 0x0E, 0x15, 0x04, 0x00},
}
