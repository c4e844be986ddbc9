package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHistQuantiles(t *testing.T) {
	h := NewHist()
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, time.Millisecond}} {
		got := h.Quantile(c.q)
		if d := float64(got-c.want) / float64(c.want); d < -0.02 || d > 0.02 {
			t.Errorf("Quantile(%v) = %v, want %v ±2%%", c.q, got, c.want)
		}
	}
	back := HistFromSparse(h.Sparse())
	if back.N != h.N || back.Quantile(0.5) != h.Quantile(0.5) {
		t.Errorf("sparse round trip: N %d→%d", h.N, back.N)
	}
	for _, ns := range []int64{0, 1, 63, 64, 127, 128, 1 << 20, 1<<40 + 5, 1 << 62} {
		i := bucketOf(ns)
		if i < len(h.Counts)-1 && (lowerBound(i) > ns || lowerBound(i+1) <= ns) {
			t.Errorf("bucket %d of %d spans [%d, %d)", i, ns, lowerBound(i), lowerBound(i+1))
		}
	}
}

func TestMedianMinMax(t *testing.T) {
	for _, c := range []struct {
		in          []float64
		med, lo, hi float64
	}{
		{nil, 0, 0, 0},
		{[]float64{3}, 3, 3, 3},
		{[]float64{5, 1, 3}, 3, 1, 5},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
	} {
		med, lo, hi := MedianMinMax(c.in)
		if med != c.med || lo != c.lo || hi != c.hi {
			t.Errorf("MedianMinMax(%v) = %v %v %v, want %v %v %v", c.in, med, lo, hi, c.med, c.lo, c.hi)
		}
	}
}

func sample(v string, conc, round int, ops int64) Sample {
	h := NewHist()
	for range ops {
		h.Record(time.Millisecond)
	}
	return Sample{Variant: v, Conc: conc, Round: round, Ops: ops, Seconds: 1, Hist: h.Sparse(),
		Counts: Counts{Redis: RedisCounts{Commands: 2 * ops, RoundTrips: 2 * ops}, SQL: SQLCounts{Statements: 3 * ops}}}
}

func TestRatiosAndReport(t *testing.T) {
	var ss []Sample
	for r := 1; r <= 3; r++ {
		ss = append(ss, sample(VBare, 1, r, 100), sample(VTx, 1, r, int64(50+10*r)), sample(VReplay, 1, r, 2000),
			sample(VDTM, 1, r, 100))
	}
	rs := Ratios(ss, VTx, VBare, 1)
	if len(rs) != 3 || rs[0] != 0.6 || rs[2] != 0.8 {
		t.Fatalf("Ratios = %v", rs)
	}
	sums := Summarize(ss)
	if len(sums) != 4 || sums[1].Variant != VTx || sums[1].Median != 70 || sums[1].RedisCmds != 2 || sums[1].SQLStmts != 3 {
		t.Fatalf("Summarize = %+v", sums)
	}
	res := &Results{Command: "idembench", Samples: ss, Config: ConfigInfo{Concurrency: []int{1}, Rounds: 3, Variants: []string{VBare, VTx, VReplay, VDTM}}}
	dir := t.TempDir()
	md := filepath.Join(dir, "B.md")
	if err := os.WriteFile(md, []byte("intro\n"+MarkStart+"\nold\n"+MarkEnd+"\noutro\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdownFile(md, res, "b.png"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(md)
	out := string(b)
	for _, want := range []string{"intro\n", "outro\n", "| Tx mode ≥ 0.8× DTM barrier | 0.70× (0.60×–0.80×) ❌ |", "| cached replay ≥ 10× bare transaction | 20.0× (20.0×–20.0×) ✅ |", "| replay | 2000"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(out, "old\n") {
		t.Error("report kept the text between the markers")
	}
}
