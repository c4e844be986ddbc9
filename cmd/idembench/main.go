// Command idembench measures idemkit against a bare transaction, DTM's barrier and the classic
// "lock + dedupe table" flow, in one run on the same MariaDB and Redis, and writes the results as
// Markdown and JSON; the chart the report links to is drawn from the JSON by tools/benchchart (its own module,
// so the plotting library stays out of the library's go.mod). See docs/BENCHMARKS.md and scripts/bench.sh.
//
//	go run ./cmd/idembench                               # default run, summary on stdout
//	go run ./cmd/idembench -out docs/BENCHMARKS.md -json docs/bench.json -chart docs/bench.png
//	go run ./cmd/idembench -variants execute,replay -c 16 -rounds 1 -duration 10s -cpuprofile cpu.pprof
//	go run ./cmd/idembench -heap -variants none          # heap after 10k and 100k guarded requests
//	go run ./cmd/idembench -report docs/bench.json -out docs/BENCHMARKS.md   # re-render, no run
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit/internal/bench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "idembench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		rounds     = flag.Int("rounds", 7, "rounds per concurrency level")
		duration   = flag.Duration("duration", time.Second, "length of one segment (one variant, one round)")
		ops        = flag.Int("ops", 0, "requests per segment instead of -duration (0: use -duration)")
		warmup     = flag.Duration("warmup", 300*time.Millisecond, "unrecorded warm-up per variant and concurrency level")
		concList   = flag.String("c", "1,16,64", "concurrency levels, comma-separated")
		variants   = flag.String("variants", "default", `variants, comma-separated; "default", "all" or "none"`)
		out        = flag.String("out", "", "Markdown report to write (text outside its idembench markers is kept)")
		jsonOut    = flag.String("json", "", "JSON results to write")
		chartOut   = flag.String("chart", "", "PNG chart the Markdown report links to (draw it with tools/benchchart)")
		summaryOut = flag.String("summary", "", "README summary block to write")
		report     = flag.String("report", "", "render -out/-chart/-summary from this JSON file instead of running")
		heap       = flag.Bool("heap", false, "measure the heap of the guarded HTTP server after -heap-requests fresh-key and replayed requests")
		heapReqs   = flag.String("heap-requests", "10000,100000", "heap checkpoints (requests served), comma-separated")
		heapConc   = flag.Int("heap-c", 16, "concurrency of the heap measurement")
		cpuProf    = flag.String("cpuprofile", "", "write a CPU profile of the measured rounds")
		memProf    = flag.String("memprofile", "", "write an allocation profile of the measured rounds")
		dsnParams  = flag.String("dsn-params", bench.DefaultDSNParams, `MySQL DSN parameters of the pool ("-" for none)`)
		maxConns   = flag.Int("maxconns", bench.DefaultMaxConns, "MySQL pool size (open and idle) and Redis pool size")
		cleanup    = flag.Bool("cleanup", false, "drop tables, barrier rows and Redis keys left by interrupted runs, then exit")
		list       = flag.Bool("list", false, "list the variants and exit")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	if *report != "" {
		b, err := os.ReadFile(*report)
		if err != nil {
			return err
		}
		var res bench.Results
		if err := json.Unmarshal(b, &res); err != nil {
			return err
		}
		return writeOutputs(&res, *out, "", *chartOut, *summaryOut)
	}

	cfg := &bench.Config{DSNParams: *dsnParams, MaxConns: *maxConns}
	if *cleanup {
		names, err := bench.DropLeftovers(ctx, cfg)
		fmt.Println("dropped:", strings.Join(names, " "))
		return err
	}
	concs, err := ints(*concList)
	if err != nil {
		return fmt.Errorf("-c: %w", err)
	}
	heapCPs, err := ints(*heapReqs)
	if err != nil {
		return fmt.Errorf("-heap-requests: %w", err)
	}

	env, err := bench.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := env.Close(cctx); err != nil {
			fmt.Fprintln(os.Stderr, "idembench: cleaning up:", err)
		}
	}()
	vs, err := bench.Variants(env)
	if err != nil {
		return err
	}
	var names []string
	switch *variants {
	case "default":
		names = bench.DefaultVariants
	case "all":
		names = append(names, bench.DefaultVariants...)
		for n := range vs {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		slices.Sort(names[len(bench.DefaultVariants):])
	case "none", "":
	default:
		names = strings.Split(*variants, ",")
	}
	if *list {
		for _, n := range sortedKeys(vs) {
			def := " "
			if slices.Contains(bench.DefaultVariants, n) {
				def = "*"
			}
			fmt.Printf("%s %-20s %s\n", def, n, vs[n].What)
		}
		return nil
	}
	for _, n := range names {
		if vs[n] == nil {
			return fmt.Errorf("unknown variant %q (see -list)", n)
		}
	}

	res := &bench.Results{
		Command: "go run ./cmd/idembench " + strings.Join(os.Args[1:], " "),
		Date:    time.Now(),
		Machine: bench.Describe(ctx, env),
		Config: bench.ConfigInfo{Concurrency: concs, Rounds: *rounds, Warmup: warmup.String(), Variants: names,
			DSNParams: env.DSNParams(), MaxConns: *maxConns, GOMAXPROCS: runtime.GOMAXPROCS(0)},
		What: map[string]string{},
	}
	if *ops > 0 {
		res.Config.Ops = *ops
	} else {
		res.Config.Duration = duration.String()
	}
	for _, n := range names {
		res.What[n] = vs[n].What
	}
	if len(names) > 0 {
		est := time.Duration(len(names)*len(concs)) * (time.Duration(*rounds)**duration + *warmup)
		fmt.Fprintf(os.Stderr, "idembench: run %s, %d variants × %d levels × %d rounds; about %s of load (load average %s)\n",
			env.Run, len(names), len(concs), *rounds, est.Round(time.Second), res.Machine.Load)
	}

	if *memProf != "" {
		runtime.MemProfileRate = 4096
	}
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	start := time.Now()
	runner := bench.NewRunner(env, vs)
	if len(names) > 0 {
		res.Samples, err = runner.Run(ctx, bench.RunConfig{Concurrency: concs, Rounds: *rounds, Duration: *duration, Ops: *ops,
			Warmup: *warmup, Variants: names, Log: os.Stderr})
		if err != nil {
			return err
		}
	}
	if *cpuProf != "" {
		pprof.StopCPUProfile()
	}
	if *memProf != "" {
		f, err := os.Create(*memProf)
		if err != nil {
			return err
		}
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			return err
		}
		_ = f.Close()
	}
	if *heap {
		res.Heap, err = runner.MeasureHeap(ctx, *heapConc, 2000, heapCPs, os.Stderr)
		if err != nil {
			return err
		}
	}
	res.Duration = time.Since(start).Seconds()
	res.Machine.LoadEnd = bench.Describe(ctx, env).Load

	if *jsonOut != "" {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	return writeOutputs(res, *out, "", *chartOut, *summaryOut)
}

func writeOutputs(res *bench.Results, out, _ string, chart, summary string) error {
	if out != "" {
		rel := ""
		if chart != "" {
			rel = relTo(out, chart)
		}
		if err := bench.WriteMarkdownFile(out, res, rel); err != nil {
			return err
		}
	} else {
		bench.WriteMarkdown(os.Stdout, res, "")
	}
	if summary != "" {
		f, err := os.Create(summary)
		if err != nil {
			return err
		}
		bench.WriteSummary(f, res)
		return f.Close()
	}
	return nil
}

// relTo returns target's path relative to the directory of from, when target lies under it.
func relTo(from, target string) string {
	dir := from[:strings.LastIndex(from, "/")+1]
	if rest, ok := strings.CutPrefix(target, dir); ok && dir != "" {
		return rest
	}
	return target
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
