// Command loadchart turns hey's per-request CSV (hey -o csv) into a chart of
// responses per second by status (200 admitted, 429 throttled) against a
// limit, for scripts/loadtest.sh.
//
//	go run -C scripts ./loadchart -in run.csv -limit 200 -out ../docs/loadtest.svg
package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"image/color"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

func main() {
	in := flag.String("in", "", "hey -o csv output")
	limit := flag.Float64("limit", 0, "the configured limit, requests per second")
	out := flag.String("out", "loadtest.svg", "chart to write (.svg or .png)")
	title := flag.String("title", "sluiced proxy under load", "chart title")
	flag.Parse()
	if err := run(*in, *limit, *out, *title); err != nil {
		fmt.Fprintln(os.Stderr, "loadchart:", err)
		os.Exit(1)
	}
}

func run(in string, limit float64, out, title string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return fmt.Errorf("read %s: %w", in, err)
	}
	if len(rows) < 2 {
		return fmt.Errorf("%s has no requests", in)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	sc, ok1 := col["status-code"]
	off, ok2 := col["offset"]
	if !ok1 || !ok2 {
		return fmt.Errorf("%s: want hey's CSV with status-code and offset columns", in)
	}
	ok, throttled := map[int]float64{}, map[int]float64{}
	last := 0
	for _, r := range rows[1:] {
		t, err := strconv.ParseFloat(r[off], 64)
		if err != nil {
			continue
		}
		sec := int(t)
		last = max(last, sec)
		switch r[sc] {
		case "200":
			ok[sec]++
		case "429":
			throttled[sec]++
		}
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "responses per second"
	series := func(m map[int]float64) plotter.XYs {
		xy := make(plotter.XYs, 0, last+1)
		for s := 0; s < last; s++ { // the last second is partial
			xy = append(xy, plotter.XY{X: float64(s + 1), Y: m[s]})
		}
		return xy
	}
	lim := plotter.XYs{{X: 1, Y: limit}, {X: float64(max(last, 2)), Y: limit}}
	for _, s := range []struct {
		name string
		xy   plotter.XYs
		c    color.Color
	}{
		{"200 admitted", series(ok), color.RGBA{G: 140, A: 255}},
		{"429 throttled", series(throttled), color.RGBA{R: 200, A: 255}},
		{"configured limit", lim, color.Gray{Y: 100}},
	} {
		l, err := plotter.NewLine(s.xy)
		if err != nil {
			return err
		}
		l.Color, l.Width = s.c, vg.Points(2)
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	p.Legend.Top = true
	p.Y.Min = 0
	p.Y.Max *= 1.3
	return p.Save(8*vg.Inch, 4*vg.Inch, out)
}
