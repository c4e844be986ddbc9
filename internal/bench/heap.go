package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
)

// HeapPoint is the process's heap after a garbage collection, once a number of requests were served.
type HeapPoint struct {
	Phase      string  `json:"phase"`
	Requests   int     `json:"requests"`
	HeapAlloc  uint64  `json:"heap_alloc"` // live bytes after GC
	HeapInuse  uint64  `json:"heap_inuse"`
	Objects    uint64  `json:"heap_objects"`
	Goroutines int     `json:"goroutines"`
	Errors     int64   `json:"errors"`
	RPS        float64 `json:"rps"`
}

// MeasureHeap loads the guarded loopback HTTP server (httpx middleware, record Store on MariaDB, lock
// Locker on Redis: whatever grows with the number of keys lives in those services) with conc clients:
// first with a fresh key per request, then replaying finished keys. After warm requests and at each
// checkpoint (cumulative requests of the phase) it collects garbage twice and reads the heap. Server
// and clients share the process, so the figures include both.
func (r *Runner) MeasureHeap(ctx context.Context, conc, warm int, checkpoints []int, log io.Writer) ([]HeapPoint, error) {
	if log == nil {
		log = io.Discard
	}
	var out []HeapPoint
	for _, ph := range []struct{ name, variant string }{{"fresh keys", VHTTPGuarded}, {"replays", VHTTPReplay}} {
		v, ok := r.Variants[ph.variant]
		if !ok {
			return out, fmt.Errorf("bench: no variant %s", ph.variant)
		}
		if s := r.Segment(ctx, v, conc, 0, 0, warm); s.Errors > 0 {
			return out, fmt.Errorf("bench: heap warm-up of %s: %s", ph.variant, s.FirstError)
		}
		out = append(out, heapPoint(ph.name, 0, 0, 0))
		fmt.Fprintf(log, "heap %-10s after %6d warm requests: %s\n", ph.name, warm, fmtBytes(out[len(out)-1].HeapAlloc))
		done := 0
		var errs int64
		for _, cp := range checkpoints {
			if cp <= done {
				continue
			}
			s := r.Segment(ctx, v, conc, 0, 0, cp-done)
			if err := ctx.Err(); err != nil {
				return out, err
			}
			done = cp
			errs += s.Errors
			pt := heapPoint(ph.name, cp, errs, s.RPS())
			out = append(out, pt)
			fmt.Fprintf(log, "heap %-10s after %6d requests: live %s, in use %s, %d objects, %d goroutines, errors %d\n",
				ph.name, cp, fmtBytes(pt.HeapAlloc), fmtBytes(pt.HeapInuse), pt.Objects, pt.Goroutines, errs)
		}
	}
	return out, nil
}

func heapPoint(phase string, n int, errs int64, rps float64) HeapPoint {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return HeapPoint{Phase: phase, Requests: n, HeapAlloc: m.HeapAlloc, HeapInuse: m.HeapInuse, Objects: m.HeapObjects,
		Goroutines: runtime.NumGoroutine(), Errors: errs, RPS: rps}
}

func fmtBytes(b uint64) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }

func writeHeap(w io.Writer, pts []HeapPoint) {
	fmt.Fprintf(w, "## Memory: heap of a guarded server under load\n\n")
	fmt.Fprintf(w, "Heap after two forced GCs (runtime.ReadMemStats), loopback HTTP server with httpx.Middleware, record Store on MariaDB and Redis Locker; load generator in the same process. Requests counted from the end of the warm-up.\n\n")
	fmt.Fprintf(w, "| phase | requests served | live heap (HeapAlloc) | heap in use | heap objects | goroutines | req/s of the last stretch | errors |\n|---|---|---|---|---|---|---|---|\n")
	for _, p := range pts {
		rps := "—"
		if p.RPS > 0 {
			rps = fmtRPS(p.RPS)
		}
		req := fmt.Sprint(p.Requests)
		if p.Requests == 0 {
			req = "0 (after warm-up)"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %d | %s | %d |\n", p.Phase, req, fmtBytes(p.HeapAlloc), fmtBytes(p.HeapInuse), p.Objects, p.Goroutines, rps, p.Errors)
	}
	fmt.Fprintln(w)
}
