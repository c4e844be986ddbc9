package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// RunConfig says what to measure. Rounds × Concurrency × Variants segments run, the variants
// interleaved within each round (A B C … A B C …) so that drift in the machine's load hits all of them.
type RunConfig struct {
	Concurrency []int
	Rounds      int
	// Duration of one segment, when Ops is 0.
	Duration time.Duration
	// Ops is the number of requests of one segment (all workers together); 0 means use Duration.
	Ops int
	// Warmup runs each variant this long, unrecorded, before the rounds of each concurrency level.
	Warmup   time.Duration
	Variants []string
	// Log receives one line per segment. Defaults to none.
	Log io.Writer
}

// Sample is one segment: one variant at one concurrency in one round.
type Sample struct {
	Variant    string      `json:"variant"`
	Conc       int         `json:"conc"`
	Round      int         `json:"round"`
	Ops        int64       `json:"ops"` // successful requests
	Errors     int64       `json:"errors"`
	FirstError string      `json:"first_error,omitempty"`
	Seconds    float64     `json:"seconds"`
	Counts     Counts      `json:"counts"`
	Server     ServerStats `json:"server"`
	Allocs     uint64      `json:"allocs"` // heap allocations of the whole process during the segment
	AllocBytes uint64      `json:"alloc_bytes"`
	Hist       [][2]int64  `json:"hist"`
	Load1      float64     `json:"load1"` // load average when the segment ended
}

// RPS is the segment's throughput in successful requests per second.
func (s *Sample) RPS() float64 {
	if s.Seconds == 0 {
		return 0
	}
	return float64(s.Ops) / s.Seconds
}

// Runner runs segments on an Env.
type Runner struct {
	Env      *Env
	Variants map[string]*Variant
	segments atomic.Int64
	setUp    map[string]bool
}

// NewRunner returns a Runner over e's variants.
func NewRunner(e *Env, vs map[string]*Variant) *Runner {
	return &Runner{Env: e, Variants: vs, setUp: map[string]bool{}}
}

// Run measures cfg and returns every segment's sample, in the order run.
func (r *Runner) Run(ctx context.Context, cfg RunConfig) ([]Sample, error) {
	log := cfg.Log
	if log == nil {
		log = io.Discard
	}
	vs := make([]*Variant, 0, len(cfg.Variants))
	for _, n := range cfg.Variants {
		v, ok := r.Variants[n]
		if !ok {
			return nil, fmt.Errorf("bench: unknown variant %q", n)
		}
		vs = append(vs, v)
	}
	for _, v := range vs {
		if err := r.setup(ctx, v); err != nil {
			return nil, err
		}
	}
	var out []Sample
	for _, conc := range cfg.Concurrency {
		if cfg.Warmup > 0 {
			for _, v := range vs {
				s := r.Segment(ctx, v, conc, 0, cfg.Warmup, 0)
				if err := ctx.Err(); err != nil {
					return out, err
				}
				fmt.Fprintf(log, "c=%-3d warmup  %-18s %8.0f req/s  errors %d %s\n", conc, v.Name, s.RPS(), s.Errors, s.FirstError)
			}
		}
		for round := 1; round <= cfg.Rounds; round++ {
			for _, v := range vs {
				s := r.Segment(ctx, v, conc, round, cfg.Duration, cfg.Ops)
				if err := ctx.Err(); err != nil {
					return out, err
				}
				out = append(out, s)
				h := HistFromSparse(s.Hist)
				fmt.Fprintf(log, "c=%-3d round %d %-18s %8.0f req/s  p50 %8s  p99 %8s  redis %.2f  sql %.2f  allocs %.0f  cpu µs/req go %.0f redis %.0f mariadb %.0f  fsync/req %.2f  lockwaits %d  errors %d %s\n",
					conc, round, v.Name, s.RPS(), h.Quantile(0.5).Round(time.Microsecond), h.Quantile(0.99).Round(time.Microsecond),
					per(s.Counts.Redis.Commands, s.Ops), per(s.Counts.SQL.Statements, s.Ops), per(int64(s.Allocs), s.Ops),
					1e6*s.Server.SelfCPU/float64(max(s.Ops, 1)), 1e6*s.Server.RedisCPU/float64(max(s.Ops, 1)), 1e6*s.Server.MariaDBCPU/float64(max(s.Ops, 1)),
					per(s.Server.LogFsyncs, s.Ops), s.Server.RowLockWaits, s.Errors, s.FirstError)
			}
		}
	}
	return out, nil
}

func (r *Runner) setup(ctx context.Context, v *Variant) error {
	if v.Setup == nil || r.setUp[v.Name] {
		return nil
	}
	if err := v.Setup(ctx); err != nil {
		return fmt.Errorf("bench: setting up %s: %w", v.Name, err)
	}
	r.setUp[v.Name] = true
	return nil
}

func per(n, ops int64) float64 {
	if ops == 0 {
		return 0
	}
	return float64(n) / float64(ops)
}

// Segment runs v on conc workers for dur, or for ops requests when ops > 0, and measures it. The
// garbage of earlier segments is collected first, so each segment pays for its own.
func (r *Runner) Segment(ctx context.Context, v *Variant, conc, round int, dur time.Duration, ops int) Sample {
	if err := r.setup(ctx, v); err != nil {
		return Sample{Variant: v.Name, Conc: conc, Round: round, Errors: 1, FirstError: err.Error()}
	}
	seg := r.segments.Add(1)
	workers := make([]*Worker, conc)
	hists := make([]*Hist, conc)
	errs := make([]int64, conc)
	firstErr := make([]error, conc)
	for i := range workers {
		pfx := r.Env.Run + "-" + strconv.FormatInt(seg, 10) + "-" + strconv.Itoa(i) + "-"
		workers[i] = &Worker{ID: i, pfx: append(make([]byte, 0, len(pfx)+24), pfx...)}
		hists[i] = NewHist()
	}
	var remaining atomic.Int64
	remaining.Store(int64(ops))

	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	c0, st0 := r.Env.Counts(), r.Env.ServerStats(ctx)
	start := time.Now()
	deadline := start.Add(dur)
	var wg sync.WaitGroup
	for i := range conc {
		wg.Go(func() {
			w, h := workers[i], hists[i]
			for ctx.Err() == nil {
				if ops > 0 && remaining.Add(-1) < 0 {
					return
				}
				t0 := time.Now()
				if ops == 0 && !t0.Before(deadline) {
					return
				}
				err := v.Op(ctx, w)
				h.Record(time.Since(t0))
				w.Seq++
				if err != nil {
					errs[i]++
					if firstErr[i] == nil {
						firstErr[i] = err
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	c1 := r.Env.Counts()
	runtime.ReadMemStats(&m1)
	st1 := r.Env.ServerStats(ctx)

	s := Sample{Variant: v.Name, Conc: conc, Round: round, Seconds: elapsed.Seconds(), Counts: c1.Sub(c0), Server: st1.Sub(st0),
		Allocs: m1.Mallocs - m0.Mallocs, AllocBytes: m1.TotalAlloc - m0.TotalAlloc, Load1: load1()}
	total := NewHist()
	for i := range conc {
		total.Merge(hists[i])
		s.Errors += errs[i]
		if firstErr[i] != nil && s.FirstError == "" {
			s.FirstError = firstErr[i].Error()
		}
	}
	s.Ops = total.N - s.Errors
	s.Hist = total.Sparse()
	return s
}
