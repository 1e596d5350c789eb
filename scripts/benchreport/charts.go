package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// series is one line of a chart.
type series struct {
	name string
	x, y []float64
}

// barGroup is one category of a grouped bar chart: a value per implementation.
type barGroup struct {
	label  string
	values []float64
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
}

// save writes the plot as an SVG into the chart directory and returns its
// path relative to the report, or "" (after saying why) if it cannot.
func save(in *inputs, p *plot.Plot, name string) string {
	if err := p.Save(8*vg.Inch, 4*vg.Inch, filepath.Join(in.chartDir, name)); err != nil {
		fmt.Fprintf(os.Stderr, "benchreport: chart %s: %v\n", name, err)
		return ""
	}
	if in.pngDir != "" { // for looking at the charts where SVG is awkward
		p.Save(8*vg.Inch, 4*vg.Inch, filepath.Join(in.pngDir, strings.TrimSuffix(name, ".svg")+".png"))
	}
	return in.chartRel + "/" + name
}

// axes say which axes of a line chart are on log scales.
type axes int

const (
	linear axes = iota
	logX
	logXY
)

// lineChart draws series against x.
func lineChart(in *inputs, name, title, xLabel, yLabel string, scale axes, ss []series) string {
	if len(ss) == 0 {
		return ""
	}
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, xLabel, yLabel
	if scale != linear {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	}
	if scale == logXY {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	} else {
		p.Y.Min = 0
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(10), vg.Points(-4)
	top := 0.0
	for _, s := range ss {
		for _, y := range s.y {
			top = max(top, y)
		}
	}
	if scale != logXY {
		p.Y.Max = top * 1.35 // room for the legend
	}
	for i, s := range ss {
		pts := make(plotter.XYs, 0, len(s.x))
		for j := range s.x {
			if scale != linear && s.x[j] <= 0 || scale == logXY && s.y[j] <= 0 {
				continue
			}
			pts = append(pts, plotter.XY{X: s.x[j], Y: s.y[j]})
		}
		if len(pts) == 0 {
			continue
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchreport: chart %s: %v\n", name, err)
			return ""
		}
		l.Color, sc.Color = palette[i%len(palette)], palette[i%len(palette)]
		sc.Shape = plotutil.Shape(i)
		p.Add(l, sc)
		p.Legend.Add(s.name, l, sc)
	}
	return save(in, p, name)
}

// barChart draws groups of bars, one bar per implementation in each group.
func barChart(in *inputs, name, title, yLabel string, impls []string, groups []barGroup) string {
	if len(groups) == 0 {
		return ""
	}
	p := plot.New()
	p.Title.Text, p.Y.Label.Text = title, yLabel
	p.Legend.Top = true
	w := vg.Points(14)
	labels := make([]string, len(groups))
	for i, g := range groups {
		labels[i] = g.label
	}
	for j, impl := range impls {
		vals := make(plotter.Values, len(groups))
		for i, g := range groups {
			if j < len(g.values) {
				vals[i] = g.values[j]
			}
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchreport: chart %s: %v\n", name, err)
			return ""
		}
		b.Color = palette[j%len(palette)]
		b.LineStyle.Width = 0
		b.Offset = vg.Length(float64(j)-float64(len(impls)-1)/2) * w
		p.Add(b)
		p.Legend.Add(impl, b)
	}
	p.NominalX(labels...)
	p.X.Min, p.X.Max = -0.7, float64(len(groups))-0.3
	p.Legend.Left = true
	p.X.Tick.Label.Rotation = 0.35
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = -0.9, -0.3
	return save(in, p, name)
}
