package main

import (
	"fmt"
	"image/color"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/sluicelabs/sluice/testcluster"
)

var palette = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255}, color.RGBA{R: 255, G: 127, B: 14, A: 255},
	color.RGBA{R: 44, G: 160, B: 44, A: 255}, color.RGBA{R: 214, G: 39, B: 40, A: 255},
	color.RGBA{R: 148, G: 103, B: 189, A: 255}, color.RGBA{R: 140, G: 86, B: 75, A: 255},
}

// writeCharts draws admitted.svg/.png (per-node and cluster admissions per second
// against the limit) and convergence.svg (balance spread and probe lag).
func writeCharts(dir, title string, seconds []testcluster.Second, perSec float64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "admitted per second"
	limit := make(plotter.XYs, len(seconds))
	cluster := make(plotter.XYs, len(seconds))
	for i, s := range seconds {
		limit[i] = plotter.XY{X: float64(s.T), Y: perSec}
		cluster[i] = plotter.XY{X: float64(s.T), Y: float64(s.Cluster)}
	}
	if err := addLine(p, "cluster", cluster, color.Black, 2); err != nil {
		return err
	}
	if err := addLine(p, "limit", limit, color.Gray{Y: 120}, 1); err != nil {
		return err
	}
	for n := range seconds[0].Admitted {
		xy := make(plotter.XYs, len(seconds))
		for i, s := range seconds {
			xy[i] = plotter.XY{X: float64(s.T), Y: float64(s.Admitted[n])}
		}
		if err := addLine(p, fmt.Sprint("node ", n), xy, palette[n%len(palette)], 1); err != nil {
			return err
		}
	}
	p.Legend.Top = true
	p.Y.Min = 0
	p.Y.Max *= 1.35
	if err := save(p, dir, "admitted"); err != nil {
		return err
	}

	q := plot.New()
	q.Title.Text = "convergence: " + title
	q.X.Label.Text = "seconds"
	q.Y.Label.Text = "tokens / milliseconds"
	spread := make(plotter.XYs, len(seconds))
	var lag plotter.XYs
	for i, s := range seconds {
		spread[i] = plotter.XY{X: float64(s.T), Y: s.Spread}
		for _, l := range s.LagMs {
			lag = append(lag, plotter.XY{X: float64(s.T), Y: l})
		}
	}
	if err := addLine(q, "balance spread between nodes (tokens)", spread, palette[0], 2); err != nil {
		return err
	}
	if len(lag) > 0 {
		sc, err := plotter.NewScatter(lag)
		if err != nil {
			return err
		}
		sc.Color = palette[3]
		q.Add(sc)
		q.Legend.Add("convergence lag of a probe (ms)", sc)
	}
	q.Legend.Top = true
	q.Y.Min = 0
	q.Y.Max *= 1.35 // room for the legend above the data
	return save(q, dir, "convergence")
}

// save writes the chart as SVG (for the README) and PNG (for a quick look).
func save(p *plot.Plot, dir, name string) error {
	for _, ext := range []string{".svg", ".png"} {
		if err := p.Save(8*vg.Inch, 4*vg.Inch, filepath.Join(dir, name+ext)); err != nil {
			return err
		}
	}
	return nil
}

func addLine(p *plot.Plot, name string, xy plotter.XYs, c color.Color, width float64) error {
	l, err := plotter.NewLine(xy)
	if err != nil {
		return err
	}
	l.Color = c
	l.Width = vg.Points(width)
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}
