package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"text/template"
)

// bar is one contender on a suite's chart.
type bar struct {
	Name             string
	Median, Min, Max float64
	Note             string
}

// chartRow is a bar laid out in pixels.
type chartRow struct {
	bar
	Y, W, WMin, WMax, LabelX float64
	Label                    string
}

type chartData struct {
	Title, Subtitle string
	Ratios          []string
	Rows            []chartRow
	Ticks           []chartTick
	Width, Height   float64
	Left, PlotW     float64
	PlotTop, PlotH  float64
	RatioY          float64
}

type chartTick struct {
	X     float64
	Label string
}

var chartTmpl = template.Must(template.New("svg").Funcs(template.FuncMap{"esc": func(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}, "add": func(a, b float64) float64 { return a + b }, "mul": func(i int) float64 { return float64(i) * 16 }}).Parse(`<svg xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="#fff"/>
<text x="10" y="20" font-size="15" font-weight="bold">{{esc .Title}}</text>
<text x="10" y="38" fill="#555">{{esc .Subtitle}}</text>
{{range .Ticks}}<line x1="{{.X}}" y1="{{$.PlotTop}}" x2="{{.X}}" y2="{{add $.PlotTop $.PlotH}}" stroke="#ddd"/>
<text x="{{.X}}" y="{{add $.PlotTop (add $.PlotH 14)}}" text-anchor="middle" fill="#555">{{esc .Label}}</text>
{{end}}{{range .Rows}}<text x="{{add $.Left -8}}" y="{{add .Y 15}}" text-anchor="end">{{esc .Name}}</text>
<rect x="{{$.Left}}" y="{{.Y}}" width="{{.W}}" height="20" fill="#4a7fb5"><title>{{esc .Note}}</title></rect>
<line x1="{{add $.Left .WMin}}" y1="{{add .Y 10}}" x2="{{add $.Left .WMax}}" y2="{{add .Y 10}}" stroke="#222" stroke-width="1.5"/>
<line x1="{{add $.Left .WMin}}" y1="{{add .Y 4}}" x2="{{add $.Left .WMin}}" y2="{{add .Y 16}}" stroke="#222" stroke-width="1.5"/>
<line x1="{{add $.Left .WMax}}" y1="{{add .Y 4}}" x2="{{add $.Left .WMax}}" y2="{{add .Y 16}}" stroke="#222" stroke-width="1.5"/>
<text x="{{.LabelX}}" y="{{add .Y 15}}">{{esc .Label}}</text>
{{end}}{{range $i, $r := .Ratios}}<text x="10" y="{{add $.RatioY (add (mul $i) 0)}}" font-family="monospace">{{esc $r}}</text>
{{end}}</svg>
`))

// writeChart writes dir/<suite>.svg: one horizontal bar per contender
// (the median round's throughput) with a whisker from the slowest to the
// fastest round, labelled with the median, and the RATIO lines below.
func writeChart(dir, suite string, cfg Config, bars []bar, ratios []string) (string, error) {
	const left, plotW, rowH, top = 190.0, 520.0, 28.0, 56.0
	hi := 0.0
	for _, b := range bars {
		hi = math.Max(hi, b.Max)
	}
	scale, ticks := axis(hi, plotW)
	d := chartData{
		Title:    fmt.Sprintf("%s: messages settled per second (bar: median of %d rounds; whisker: min..max)", suite, cfg.Rounds),
		Subtitle: fmt.Sprintf("n=%d per run, in-flight %d, batch %d, k=%d, payload %dB; each contender in its own process", cfg.N, cfg.InFlight, cfg.Batch, cfg.K, cfg.Payload),
		Ratios:   ratios, Left: left, PlotW: plotW, PlotTop: top, Width: left + plotW + 150,
	}
	for _, t := range ticks {
		d.Ticks = append(d.Ticks, chartTick{X: px(left + t*scale), Label: short(t)})
	}
	for i, b := range bars {
		r := chartRow{bar: b, Y: top + 6 + float64(i)*rowH, W: px(b.Median * scale), WMin: px(b.Min * scale), WMax: px(b.Max * scale)}
		r.LabelX = left + math.Max(r.W, r.WMax) + 6
		r.Label = short(b.Median) + "/s"
		d.Rows = append(d.Rows, r)
	}
	d.PlotH = float64(len(bars))*rowH + 8
	d.RatioY = top + d.PlotH + 36
	d.Height = d.RatioY + float64(len(ratios))*16 + 10
	var buf bytes.Buffer
	if err := chartTmpl.Execute(&buf, d); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, suite+".svg")
	return path, os.WriteFile(path, buf.Bytes(), 0o644)
}

// px rounds a coordinate to a tenth of a pixel.
func px(v float64) float64 { return math.Round(v*10) / 10 }

// axis picks a round tick step for values up to hi over w pixels.
func axis(hi, w float64) (scale float64, ticks []float64) {
	if hi <= 0 {
		hi = 1
	}
	step := math.Pow(10, math.Floor(math.Log10(hi)))
	for hi/step < 4 {
		step /= 2
	}
	top := math.Ceil(hi/step) * step
	for t := 0.0; t <= top+step/2; t += step {
		ticks = append(ticks, t)
	}
	return w / top, ticks
}

// short formats 43612 as 43.6k.
func short(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
