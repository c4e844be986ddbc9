package main

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// chart draws one grouped bar chart: median req/s of every variant, one bar per concurrency level,
// on a logarithmic axis (bars start at 1 req/s), and saves it as a PNG at path.
func chart(res *results, path string) error {
	sums := summarize(res.Samples)
	names := res.Config.Variants
	concs := res.Config.Concurrency
	p := plot.New()
	p.Title.Text = fmt.Sprintf("idemkit benchmark: median req/s over %d rounds (log scale)", res.Config.Rounds)
	p.Y.Label.Text = "requests per second"
	p.Y.Tick.Marker = logTicks{}
	p.Legend.Top = true
	p.Legend.Left = false
	palette := []color.Color{
		color.RGBA{R: 0x4c, G: 0x72, B: 0xb0, A: 0xff},
		color.RGBA{R: 0xdd, G: 0x84, B: 0x52, A: 0xff},
		color.RGBA{R: 0x55, G: 0xa8, B: 0x68, A: 0xff},
		color.RGBA{R: 0xc4, G: 0x4e, B: 0x52, A: 0xff},
	}
	width := vg.Length(max(18, 2*len(names))) * vg.Centimeter
	category := (width - 3*vg.Centimeter) / vg.Length(max(len(names), 1))
	w := category * 0.8 / vg.Length(max(len(concs), 1))
	maxV := 1.0
	for i, c := range concs {
		vals := make(plotter.Values, len(names))
		for j, n := range names {
			for _, s := range sums {
				if s.Variant == n && s.Conc == c && s.Median > 1 {
					vals[j] = math.Log10(s.Median)
					maxV = math.Max(maxV, vals[j])
				}
			}
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bars.LineStyle.Width = 0
		bars.Color = palette[i%len(palette)]
		bars.Offset = w * vg.Length(float64(i)-float64(len(concs)-1)/2)
		p.Add(bars)
		p.Legend.Add(fmt.Sprintf("%d concurrent", c), bars)
	}
	p.Y.Min, p.Y.Max = 0, math.Ceil(maxV+0.3)
	p.Add(plotter.NewGrid())
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YTop
	p.Legend.XOffs = -vg.Centimeter
	return p.Save(width, 12*vg.Centimeter, path)
}

// logTicks labels an axis holding log10 values with the powers of ten and minor ticks between them.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(lo); e <= hi; e++ {
		ts = append(ts, plot.Tick{Value: e, Label: powLabel(e)})
		for m := 2.0; m < 10; m++ {
			if v := e + math.Log10(m); v <= hi {
				ts = append(ts, plot.Tick{Value: v})
			}
		}
	}
	return ts
}

func powLabel(e float64) string {
	v := math.Pow(10, e)
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", v)
}
