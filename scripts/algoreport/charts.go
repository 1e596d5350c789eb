package main

import (
	"fmt"
	"image/color"
	"os"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The colours of docs/benchmarks' charts, so the docs read as one set.
var (
	blue  = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	red   = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	green = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	grey  = color.Gray{Y: 0xd0}
)

// trace is one algorithm driven through one scenario.
type trace struct {
	outs []outcome
	sum  summary
}

// binWidth is the width of the bars: requests per 100 ms.
const binWidth = 100 * time.Millisecond

// scenarioChart draws one panel per algorithm, stacked on a shared time
// axis: requests arriving and admitted per 100 ms as bars, and the number
// admitted in the rolling second ending at each instant as a line against
// the limit.
func scenarioChart(path string, sc scenario, runs []trace) error {
	horizon := sc.horizon.Seconds()
	top := float64(limitCount)
	for _, n := range perBin(sc.arrivals, binWidth, sc.horizon) {
		top = max(top, float64(n))
	}
	for _, r := range runs {
		top = max(top, float64(r.sum.maxPerPeriod))
	}
	top *= 1.15

	legend := plot.NewLegend()
	legend.Top, legend.Left = true, false
	legend.TextStyle.Font.Size = vg.Points(9)
	plots := make([][]*plot.Plot, len(runs))
	for i, r := range runs {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s: %d admitted, %d refused; at most %d in any 1 s", r.sum.algo, r.sum.admitted, r.sum.refused, r.sum.maxPerPeriod)
		p.Title.TextStyle.Font.Size = vg.Points(10)
		p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, horizon, 0, top
		p.X.Tick.Marker, p.Y.Tick.Marker = ticks(horizon, 1, 0.1, "%.0f"), ticks(top, 10, 5, "%.0f")
		p.Y.Label.Text = "requests"
		if i == len(runs)-1 {
			p.X.Label.Text = "time (s)"
		}
		p.Add(plotter.NewGrid())

		arrived := bars(perBin(sc.arrivals, binWidth, sc.horizon), grey)
		admitted := bars(perBin(admittedAt(r.outs), binWidth, sc.horizon), blue)
		p.Add(arrived, admitted)

		pts := plotter.XYs{}
		for _, s := range rolling(admittedAt(r.outs), limitPeriod) {
			if s.at.Seconds() <= horizon {
				pts = append(pts, plotter.XY{X: s.at.Seconds(), Y: float64(s.n)})
			}
		}
		pts = append(pts, plotter.XY{X: horizon, Y: pts[len(pts)-1].Y})
		window, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		window.StepStyle, window.Color, window.Width = plotter.PostStep, red, vg.Points(1.5)

		limit, err := plotter.NewLine(plotter.XYs{{X: 0, Y: limitCount}, {X: horizon, Y: limitCount}})
		if err != nil {
			return err
		}
		limit.Color, limit.Dashes = green, []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(window, limit)

		if i == 0 {
			legend.Add("requests arriving per 100 ms", arrived)
			legend.Add("admitted per 100 ms", admitted)
			legend.Add("admitted in the last 1 s (rolling)", window)
			legend.Add(fmt.Sprintf("limit: %d per %s", limitCount, limitPeriod), limit)
		}
		plots[i] = []*plot.Plot{p}
	}

	panel, header := vg.Inch*1.7, vg.Inch*0.75
	c := vgsvg.New(8*vg.Inch, panel*vg.Length(len(runs))+header)
	dc := draw.New(c)
	dc.FillPolygon(color.White, []vg.Point{dc.Min, {X: dc.Max.X, Y: dc.Min.Y}, dc.Max, {X: dc.Min.X, Y: dc.Max.Y}})

	// The header: what the load is on the left, the legend on the right.
	hc := dc
	hc.Min.Y = dc.Max.Y - header
	hc = draw.Crop(hc, vg.Points(10), -vg.Points(10), 0, -vg.Points(6))
	style := text.Style{Color: color.Black, Font: font.From(plot.DefaultFont, 12), XAlign: draw.XLeft, YAlign: draw.YTop, Handler: plot.DefaultTextHandler}
	hc.FillText(style, vg.Point{X: hc.Min.X, Y: hc.Max.Y}, "scenario "+sc.name)
	style.Font.Size = vg.Points(10)
	hc.FillText(style, vg.Point{X: hc.Min.X, Y: hc.Max.Y - vg.Points(16)}, sc.about)
	hc.FillText(style, vg.Point{X: hc.Min.X, Y: hc.Max.Y - vg.Points(29)}, fmt.Sprintf("limit %d per %s, the same fake-clock load for each algorithm", limitCount, limitPeriod))
	legend.Draw(hc)

	dc.Max.Y -= header
	tiles := draw.Tiles{Rows: len(runs), Cols: 1, PadY: vg.Points(8), PadBottom: vg.Points(2), PadLeft: vg.Points(2), PadRight: vg.Points(10)}
	for i, cs := range plot.Align(plots, tiles, dc) {
		plots[i][0].Draw(cs[0])
	}
	return writeSVG(path, c)
}

// ticks labels every major step from 0 to top and marks every minor one.
func ticks(top, major, minor float64, format string) plot.Ticker {
	var ts plot.ConstantTicks
	for i := 0; float64(i)*minor <= top+1e-9; i++ {
		v := float64(i) * minor
		label := ""
		if r := v / major; r-float64(int(r+0.5)) < 1e-9 && float64(int(r+0.5))-r < 1e-9 {
			label = fmt.Sprintf(format, v)
		}
		ts = append(ts, plot.Tick{Value: v, Label: label})
	}
	return ts
}

// bars draws per-bin counts as adjoining bars.
func bars(counts []int, fill color.Color) *plotter.Histogram {
	w := binWidth.Seconds()
	h := &plotter.Histogram{Width: w, FillColor: fill}
	h.LineStyle.Width = 0
	for i, n := range counts {
		h.Bins = append(h.Bins, plotter.HistogramBin{Min: float64(i) * w, Max: float64(i+1) * w, Weight: float64(n)})
	}
	return h
}

// shapingChart draws, for each bucket asked with Reserve, when each of the
// requests that arrived together may go ahead.
func shapingChart(path string, n int, maxWait time.Duration, sims []shaping) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Shaping: %d requests at once, Reserve with maxWait %s; limit %d per %s, burst %d", n, maxWait, limitCount, limitPeriod, limitCount)
	p.X.Label.Text, p.Y.Label.Text = "request (in order of arrival)", "goes ahead at (s)"
	p.X.Min, p.X.Max, p.Y.Min = 0, float64(n)+1, 0
	p.X.Tick.Marker = ticks(float64(n), 5, 1, "%.0f")
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(10), vg.Points(-4)
	top := 0.0
	for i, s := range sims {
		pts := plotter.XYs{}
		gone := 0
		for j, o := range s.outs {
			if o.allowed {
				gone++
				d := (o.at + o.wait).Seconds()
				pts = append(pts, plotter.XY{X: float64(j + 1), Y: d})
				top = max(top, d)
			}
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		sc.Color, sc.Shape, sc.Radius = []color.Color{blue, red}[i%2], []draw.GlyphDrawer{draw.CircleGlyph{}, draw.BoxGlyph{}}[i%2], vg.Points(3.5)
		p.Add(sc)
		p.Legend.Add(fmt.Sprintf("%s: %d go ahead, %d refused", s.algo, gone, len(s.outs)-gone), sc)
	}
	p.Y.Max = max(top*1.4, 0.5)
	c := vgsvg.New(8*vg.Inch, 4*vg.Inch)
	p.Draw(draw.New(c))
	return writeSVG(path, c)
}

func writeSVG(path string, c *vgsvg.Canvas) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}
