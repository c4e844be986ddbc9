package bench

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Results is everything one run of the command produced; it is saved as JSON so reports can be
// rendered again (idembench -report).
type Results struct {
	Command  string            `json:"command"`
	Date     time.Time         `json:"date"`
	Machine  Machine           `json:"machine"`
	Config   ConfigInfo        `json:"config"`
	Samples  []Sample          `json:"samples,omitempty"`
	What     map[string]string `json:"what,omitempty"` // variant → description
	Heap     []HeapPoint       `json:"heap,omitempty"`
	Duration float64           `json:"duration_seconds"`
}

// ConfigInfo records the settings of a run.
type ConfigInfo struct {
	Concurrency []int    `json:"concurrency"`
	Rounds      int      `json:"rounds"`
	Duration    string   `json:"segment_duration,omitempty"`
	Ops         int      `json:"segment_ops,omitempty"`
	Warmup      string   `json:"warmup"`
	Variants    []string `json:"variants"`
	DSNParams   string   `json:"dsn_params"`
	MaxConns    int      `json:"max_conns"`
	GOMAXPROCS  int      `json:"gomaxprocs"`
}

// Markers delimiting the generated part of BENCHMARKS.md; text outside them is kept.
const (
	MarkStart = "<!-- idembench:results:start -->"
	MarkEnd   = "<!-- idembench:results:end -->"
)

// WriteMarkdownFile renders res into path, replacing only the text between MarkStart and MarkEnd
// when the file already has them.
func WriteMarkdownFile(path string, res *Results, chart string) error {
	var gen bytes.Buffer
	WriteMarkdown(&gen, res, chart)
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var out string
	s := string(old)
	i, j := strings.Index(s, MarkStart), strings.Index(s, MarkEnd)
	if i >= 0 && j > i {
		out = s[:i] + MarkStart + "\n" + gen.String() + s[j:]
	} else {
		out = "# idemkit benchmarks\n\n" + MarkStart + "\n" + gen.String() + MarkEnd + "\n"
	}
	return os.WriteFile(path, []byte(out), 0o644)
}

func fmtRPS(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%.0f", v)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

func fmtRatio(v float64) string {
	if v >= 10 {
		return fmt.Sprintf("%.1f×", v)
	}
	return fmt.Sprintf("%.2f×", v)
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	}
}

func ratioCell(rs []float64, min float64) string {
	if len(rs) == 0 {
		return "—"
	}
	med, lo, hi := MedianMinMax(rs)
	cell := fmt.Sprintf("%s (%s–%s)", fmtRatio(med), fmtRatio(lo), fmtRatio(hi))
	if min > 0 {
		switch {
		case lo >= min:
			cell += " ✅"
		case med >= min:
			cell += " ✅ (median; not every round)"
		default:
			cell += " ❌"
		}
	}
	return cell
}

// WriteMarkdown writes the generated part of the report.
func WriteMarkdown(w io.Writer, res *Results, chart string) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	m := res.Machine
	c := res.Config
	p("\n## Run\n\n")
	p("```sh\n%s\n```\n\n", res.Command)
	p("| | |\n|---|---|\n")
	p("| date | %s |\n", res.Date.UTC().Format("2006-01-02 15:04 UTC"))
	p("| machine | %s, %d cores (GOMAXPROCS %d), %d MiB RAM, Linux %s |\n", m.CPU, m.Cores, c.GOMAXPROCS, m.MemoryMB, m.Kernel)
	p("| software | Go %s, MariaDB %s (innodb_flush_log_at_trx_commit=%s), Redis %s — all on this machine, over loopback |\n", strings.TrimPrefix(m.Go, "go"), m.MariaDB, m.Flush, m.Redis)
	p("| load average (1/5/15 min) | %s at the start, %s at the end (shared machine; other jobs were running) |\n", m.Load, m.LoadEnd)
	if len(res.Samples) > 0 {
		loads := make([]float64, len(res.Samples))
		for i, s := range res.Samples {
			loads[i] = s.Load1
		}
		med, lo, hi := MedianMinMax(loads)
		p("| 1-minute load average at the end of each segment | median %.1f (%.1f–%.1f) on 2 cores |\n", med, lo, hi)
	}
	seg := c.Duration
	if c.Ops > 0 {
		seg = fmt.Sprintf("%d requests", c.Ops)
	}
	p("| rounds | %d per concurrency level, each variant %s per round, interleaved; warm-up %s per variant and level |\n", c.Rounds, seg, c.Warmup)
	p("| MySQL pool | one database/sql pool for every variant, %d connections; DSN parameters `%s` |\n", c.MaxConns, c.DSNParams)
	p("| run time | %.0f s |\n\n", res.Duration)

	sums := Summarize(res.Samples)
	concs := c.Concurrency
	if len(res.Samples) > 0 {
		p("## Targets\n\nThroughput ratios measured in the same rounds: median (min–max over rounds). ✅ when every round meets the target.\n\n")
		p("| target |")
		for _, cc := range concs {
			p(" c=%d |", cc)
		}
		p("\n|---|")
		for range concs {
			p("---|")
		}
		p("\n")
		for _, t := range Targets {
			p("| %s |", t.Name)
			for _, cc := range concs {
				p(" %s |", ratioCell(Ratios(res.Samples, t.Num, t.Den, cc), t.Min))
			}
			p("\n")
		}
		p("\n")

		if chart != "" {
			p("![throughput by variant and concurrency](%s)\n\n", chart)
		}

		for _, cc := range concs {
			p("## Concurrency %d\n\n", cc)
			p("| variant | req/s median (min–max) | × bare (per round) | p50 | p99 | Redis cmds/req (round trips) | SQL stmts/req | BEGIN/req | prepares/req | allocs/req | KiB/req | CPU µs/req: Go / Redis / MariaDB | fsyncs/req | errors |\n")
			p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
			for _, s := range sums {
				if s.Conc != cc {
					continue
				}
				rt := ""
				if s.RedisTrips != s.RedisCmds {
					rt = fmt.Sprintf(" (%.2f)", s.RedisTrips)
				}
				ev := ""
				if s.RedisScripts > 0.005 {
					ev = fmt.Sprintf(", %.2f script", s.RedisScripts)
				}
				if s.RedisEvals > 0.005 {
					ev += fmt.Sprintf(", %.2f EVAL", s.RedisEvals)
				}
				errs := "0"
				if s.Errors > 0 {
					errs = fmt.Sprintf("%d: %s", s.Errors, truncate(s.FirstError, 80))
				}
				p("| %s | %s (%s–%s) | %s | %s | %s | %.2f%s%s | %.2f | %.2f | %.2f | %.0f | %.1f | %.0f / %.0f / %.0f | %.2f | %s |\n",
					s.Variant, fmtRPS(s.Median), fmtRPS(s.Min), fmtRPS(s.Max), ratioCell(Ratios(res.Samples, s.Variant, VBare, cc), 0),
					fmtDur(s.P50), fmtDur(s.P99), s.RedisCmds, rt, ev, s.SQLStmts, s.SQLBegins, s.SQLPrepares, s.Allocs, s.AllocBytes/1024,
					s.GoCPU, s.RedisCPU, s.MariaDBCPU, s.Fsyncs, errs)
			}
			p("\n")
		}

		p("## Other ratios\n\nmedian (min–max over rounds)\n\n| ratio |")
		for _, cc := range concs {
			p(" c=%d |", cc)
		}
		p("\n|---|")
		for range concs {
			p("---|")
		}
		p("\n")
		for _, t := range Comparisons {
			if len(Ratios(res.Samples, t.Num, t.Den, concs[0])) == 0 {
				continue
			}
			p("| %s |", t.Name)
			for _, cc := range concs {
				p(" %s |", ratioCell(Ratios(res.Samples, t.Num, t.Den, cc), 0))
			}
			p("\n")
		}
		p("\n## Target ratios round by round\n\n| target | c | rounds |\n|---|---|---|\n")
		for _, t := range Targets {
			for _, cc := range concs {
				rs := Ratios(res.Samples, t.Num, t.Den, cc)
				if len(rs) == 0 {
					continue
				}
				parts := make([]string, len(rs))
				for i, r := range rs {
					parts[i] = fmtRatio(r)
				}
				p("| %s | %d | %s |\n", t.Name, cc, strings.Join(parts, " "))
			}
		}
		p("\n## Variants\n\n| variant | what runs per request |\n|---|---|\n")
		for _, n := range c.Variants {
			p("| %s | %s |\n", n, res.What[n])
		}
		p("\n")
	}
	if len(res.Heap) > 0 {
		writeHeap(w, res.Heap)
	}
}

func truncate(s string, n int) string {
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// WriteSummary writes the short block meant for the README: the targets at every level and the main
// variants at the middle concurrency level.
func WriteSummary(w io.Writer, res *Results) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	c := res.Config
	m := res.Machine
	if len(res.Samples) == 0 || len(c.Concurrency) == 0 {
		return
	}
	mid := c.Concurrency[len(c.Concurrency)/2]
	p("Measured with `%s` on %s (%d cores, shared), MariaDB %s, Redis %s, Go %s; %d interleaved rounds per level, ratios are medians over rounds (min–max).\n\n",
		res.Command, m.CPU, m.Cores, m.MariaDB, m.Redis, strings.TrimPrefix(m.Go, "go"), c.Rounds)
	p("| at %d concurrent clients | req/s | × bare tx | p99 | Redis cmds | SQL stmts |\n|---|---|---|---|---|---|\n", mid)
	for _, s := range Summarize(res.Samples) {
		if s.Conc != mid {
			continue
		}
		p("| %s | %s | %s | %s | %.0f | %.0f |\n", s.Variant, fmtRPS(s.Median), ratioCell(Ratios(res.Samples, s.Variant, VBare, mid), 0),
			fmtDur(s.P99), s.RedisCmds, s.SQLStmts)
	}
	p("\n| target |")
	for _, cc := range c.Concurrency {
		p(" c=%d |", cc)
	}
	p("\n|---|")
	for range c.Concurrency {
		p("---|")
	}
	p("\n")
	for _, t := range Targets {
		p("| %s |", t.Name)
		for _, cc := range c.Concurrency {
			p(" %s |", ratioCell(Ratios(res.Samples, t.Num, t.Den, cc), t.Min))
		}
		p("\n")
	}
}
