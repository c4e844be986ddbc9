// Command benchchart draws the chart of an idembench run: median requests per second of every
// variant at every concurrency level, from the JSON file idembench writes with -json.
//
//	go run . -in ../../docs/bench.json -out ../../docs/bench.png
//
// It is its own module so that the plotting library stays out of idemkit's go.mod.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
)

// results is the part of idembench's JSON report the chart needs.
type results struct {
	Config struct {
		Concurrency []int    `json:"concurrency"`
		Rounds      int      `json:"rounds"`
		Variants    []string `json:"variants"`
	} `json:"config"`
	Samples []sample `json:"samples"`
}

// sample is one measured segment.
type sample struct {
	Variant string  `json:"variant"`
	Conc    int     `json:"conc"`
	Ops     int64   `json:"ops"`
	Seconds float64 `json:"seconds"`
}

// summary is the median req/s of one variant at one concurrency level.
type summary struct {
	Variant string
	Conc    int
	Median  float64
}

func summarize(samples []sample) []summary {
	type k struct {
		v string
		c int
	}
	rps := map[k][]float64{}
	var order []k
	for _, s := range samples {
		key := k{s.Variant, s.Conc}
		if _, ok := rps[key]; !ok {
			order = append(order, key)
		}
		r := 0.0
		if s.Seconds > 0 {
			r = float64(s.Ops) / s.Seconds
		}
		rps[key] = append(rps[key], r)
	}
	out := make([]summary, 0, len(order))
	for _, key := range order {
		xs := rps[key]
		slices.Sort(xs)
		med := xs[len(xs)/2]
		if len(xs)%2 == 0 {
			med = (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
		}
		out = append(out, summary{Variant: key.v, Conc: key.c, Median: med})
	}
	return out
}

func main() {
	in := flag.String("in", "docs/bench.json", "idembench JSON report to read")
	out := flag.String("out", "docs/bench.png", "PNG chart to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "benchchart:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("reading %s: %w", in, err)
	}
	if len(res.Samples) == 0 {
		return fmt.Errorf("%s has no samples", in)
	}
	return chart(&res, out)
}
