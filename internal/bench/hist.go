package bench

import (
	"math/bits"
	"time"
)

// Hist is a latency histogram with about 1.6% resolution (64 sub-buckets per power of two of
// nanoseconds) up to 2^40 ns (18 minutes). Recording does not allocate. Not safe for concurrent use:
// each worker has its own, merged afterwards.
type Hist struct {
	Counts []int64 // by bucket index
	N      int64
}

const (
	histSub     = 64
	histOctaves = 41
)

// NewHist returns an empty histogram.
func NewHist() *Hist { return &Hist{Counts: make([]int64, histSub*histOctaves)} }

func bucketOf(ns int64) int {
	if ns < histSub {
		return int(max(ns, 0))
	}
	o := bits.Len64(uint64(ns)) - 7 // ns>>o is in [64, 128)
	i := (o+1)*histSub + int(ns>>o) - histSub
	return min(i, histSub*histOctaves-1)
}

// lowerBound is the smallest value of bucket i.
func lowerBound(i int) int64 {
	if i < histSub {
		return int64(i)
	}
	o := i/histSub - 1
	return int64(i%histSub+histSub) << o
}

// Record adds one observation.
func (h *Hist) Record(d time.Duration) {
	h.Counts[bucketOf(int64(d))]++
	h.N++
}

// Merge adds o's observations to h.
func (h *Hist) Merge(o *Hist) {
	for i, c := range o.Counts {
		h.Counts[i] += c
	}
	h.N += o.N
}

// Quantile returns the q-quantile (0 < q ≤ 1), as the midpoint of its bucket.
func (h *Hist) Quantile(q float64) time.Duration {
	if h.N == 0 {
		return 0
	}
	rank := int64(q*float64(h.N) + 0.5)
	rank = min(max(rank, 1), h.N)
	var seen int64
	for i, c := range h.Counts {
		seen += c
		if seen >= rank {
			lo, hi := lowerBound(i), lowerBound(i+1)
			return time.Duration((lo + hi) / 2)
		}
	}
	return 0
}

// Sparse returns the non-empty buckets as (index, count) pairs, for storing.
func (h *Hist) Sparse() [][2]int64 {
	var out [][2]int64
	for i, c := range h.Counts {
		if c != 0 {
			out = append(out, [2]int64{int64(i), c})
		}
	}
	return out
}

// HistFromSparse rebuilds a histogram from Sparse's output.
func HistFromSparse(s [][2]int64) *Hist {
	h := NewHist()
	for _, p := range s {
		if p[0] >= 0 && int(p[0]) < len(h.Counts) {
			h.Counts[p[0]] += p[1]
			h.N += p[1]
		}
	}
	return h
}
