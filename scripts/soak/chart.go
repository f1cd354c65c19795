package main

import (
	"image/color"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// writeChart draws three panels over run time (minutes): p99 latency,
// pending rows, outbox size (heap, indexes, TOAST, total); the held
// snapshot is shaded.
func writeChart(path string, r *run) error {
	type series struct {
		name string
		y    func(sample) float64
		col  color.Color
	}
	panels := []struct {
		title, ylabel string
		lines         []series
	}{
		{"End-to-end latency", "p99 ms", []series{
			{"p99", func(s sample) float64 { return s.P99 }, color.RGBA{R: 200, A: 255}},
			{"p50", func(s sample) float64 { return s.P50 }, color.RGBA{B: 200, A: 255}},
		}},
		{"Outbox backlog", "pending rows", []series{
			{"pending", func(s sample) float64 { return float64(s.Pending) }, color.RGBA{R: 200, G: 120, A: 255}},
		}},
		{"Outbox size", "MB", []series{
			{"total", func(s sample) float64 { return float64(s.Total()) / 1e6 }, color.RGBA{A: 255}},
			{"heap", func(s sample) float64 { return float64(s.Heap) / 1e6 }, color.RGBA{R: 200, A: 255}},
			{"indexes", func(s sample) float64 { return float64(s.Index) / 1e6 }, color.RGBA{G: 150, A: 255}},
			{"TOAST", func(s sample) float64 { return float64(s.Toast) / 1e6 }, color.RGBA{B: 200, A: 255}},
		}},
	}
	grid := make([][]*plot.Plot, len(panels))
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "minutes"
		p.Y.Label.Text = pn.ylabel
		p.Legend.Top = true
		ymax := 0.0
		for _, ln := range pn.lines {
			for _, s := range r.samples {
				if y := ln.y(s); !math.IsNaN(y) {
					ymax = max(ymax, y)
				}
			}
		}
		// The shade first, so that the lines are drawn over it.
		if r.cfg.hold > 0 && ymax > 0 {
			a, b := r.cfg.holdStart.Minutes(), (r.cfg.holdStart + r.cfg.hold).Minutes()
			shade, err := plotter.NewPolygon(plotter.XYs{{X: a, Y: 0}, {X: b, Y: 0}, {X: b, Y: ymax}, {X: a, Y: ymax}})
			if err != nil {
				return err
			}
			shade.Color = color.NRGBA{R: 150, G: 150, B: 150, A: 60}
			shade.LineStyle.Width = 0
			p.Add(shade)
			p.Legend.Add("snapshot held", shade)
		}
		for _, ln := range pn.lines {
			pts := make(plotter.XYs, 0, len(r.samples))
			for _, s := range r.samples {
				if y := ln.y(s); !math.IsNaN(y) {
					pts = append(pts, plotter.XY{X: s.T.Minutes(), Y: y})
				}
			}
			if len(pts) == 0 {
				continue
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color = ln.col
			l.Width = vg.Points(1.2)
			p.Add(l)
			p.Legend.Add(ln.name, l)
		}
		p.Add(plotter.NewGrid())
		grid[i] = []*plot.Plot{p}
	}
	img := vgimg.New(vg.Points(900), vg.Points(260*float64(len(panels))))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadX: vg.Millimeter * 3, PadY: vg.Millimeter * 5,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align(grid, tiles, dc)
	for i := range grid {
		grid[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
