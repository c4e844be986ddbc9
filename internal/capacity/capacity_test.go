//go:build linux

package capacity

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/cluster"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// TestMeasureSmall runs the whole harness at a tiny size: every figure must come out, within broad
// physical bounds, and render.
func TestMeasureSmall(t *testing.T) {
	if err := cluster.MariaDBAvailable(); err != nil {
		testsvc.Unavailable(t, "mariadbd", err)
	}
	if err := cluster.RedisAvailable(); err != nil {
		testsvc.Unavailable(t, "redis-server", err)
	}
	r, err := Measure(context.Background(), &Options{Records: 2000, Duration: 500 * time.Millisecond, Concurrency: 4, Rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	// One measurement per write mode: v2 measures more calls than v1's four (Tx with and without a
	// Locker, the cached and the uncached replay).
	if len(r.Writes) != len(writeModes) {
		t.Fatalf("%d write measurements, want %d", len(r.Writes), len(writeModes))
	}
	for _, w := range r.Writes {
		if w.Calls == 0 || w.PerSecond <= 0 || w.GoMicros <= 0 || w.Statements != "" && w.DBMicros <= 0 || w.Locker && w.RedisMicros <= 0 {
			t.Errorf("write %s: %+v", w.Mode, w)
		}
	}
	// A cached replay sends no SQL: the database's CPU per replay (its background work spread over
	// the calls) is far below a new key's.
	if replay, exec := r.write("replay"), r.write("execute"); replay.Statements != "" || replay.DBMicros >= exec.DBMicros/2 {
		t.Errorf("cached replay: %+v; execute: %+v", replay, exec)
	}
	if r.CachedValueSize < int64(r.ResultSize) || r.LoadStart == "" || r.LoadEnd == "" {
		t.Errorf("cached value of %d bytes for a %d-byte result; load %q %q", r.CachedValueSize, r.ResultSize, r.LoadStart, r.LoadEnd)
	}
	for name, v := range map[string][2]float64{
		"bytes per record":              {r.BytesPerRecord, 200},
		"index bytes per record":        {r.IndexBytesPerRecord, 10},
		"bytes per record without data": {r.BytesPerRecordMark, 100},
		"Redis bytes per lock":          {r.RedisBytesPerLock, 50},
		"Redis bytes per cached result": {r.RedisBytesPerCached, 256},
	} {
		if v[0] < v[1] || v[0] > 20_000 {
			t.Errorf("%s = %.0f, want between %.0f and 20000", name, v[0], v[1])
		}
	}
	if r.SweepDeletesPerSec <= 0 || r.SweepRecoverPerSec <= 0 || r.RedisAcquireMicros <= 0 || r.RedisReplayMicros <= 0 {
		t.Errorf("sweeper or Redis figures missing: %+v", r)
	}
	md := r.Markdown("test")
	for _, want := range []string{BeginMarker, EndMarker, "| execute |", "| tx |", "| replay |", "Extrapolated", "| 10,000 |", "per million keys"} {
		if !strings.Contains(md, want) {
			t.Errorf("the Markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestUpdateDoc(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	before := "# Title\n\nprose\n\n" + BeginMarker + "\nold\n" + EndMarker + "\n\nafter\n"
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := UpdateDoc(path, BeginMarker+"\nnew\n"+EndMarker+"\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	want := "# Title\n\nprose\n\n" + BeginMarker + "\nnew\n" + EndMarker + "\n\nafter\n"
	if string(b) != want {
		t.Fatalf("updated document:\n%q\nwant\n%q", b, want)
	}
	if err := os.WriteFile(path, []byte("no markers"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := UpdateDoc(path, "x"); err == nil {
		t.Fatal("UpdateDoc without markers succeeded")
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{thousands(1234567.4), "1,234,567"}, {thousands(999), "999"}, {thousands(-1234), "-1,234"},
		{dec(1.234), "1.23"}, {dec(12.34), "12.3"}, {dec(1234.5), "1,235"},
		{size(512), "512 B"}, {size(1536), "1.5 KiB"}, {size(3 << 30), "3.0 GiB"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
