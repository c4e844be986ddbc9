package record

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testsvc"
)

// Environment of a crash worker (TestCrashWorker), set by TestGroupCommitSurvivesKill.
const (
	envCrashBackend = "IDEMKIT_CRASH_BACKEND" // backend name: runs the worker
	envCrashTable   = "IDEMKIT_CRASH_TABLE"
	envCrashBiz     = "IDEMKIT_CRASH_BIZ"
	envCrashKeys    = "IDEMKIT_CRASH_KEYS"
)

const (
	crashKeys    = 3000
	crashClients = 16
	crashKills   = 3
	crashScope   = "crash"
	crashLease   = time.Second
)

// crashGuard returns the Guard of a crash run on s: Execute mode without a Locker, so every claim and
// finish goes through the Store's group commit under concurrency.
func crashGuard(t testing.TB, s *Store) *idemkit.Guard {
	g, err := idemkit.New(s, &idemkit.Options{Lease: crashLease})
	must(t, err)
	return g
}

// crashCall runs key through g with its business: a row of its own in the business table, in a
// transaction of its own (Execute mode), and the result "r-<key>".
func crashCall(ctx context.Context, g *idemkit.Guard, db *gorm.DB, biz, key string) (idemkit.Result, error) {
	return g.Do(ctx, idemkit.Call{Scope: crashScope, Key: key}, func(ctx context.Context) ([]byte, error) {
		return []byte("r-" + key), db.WithContext(ctx).Exec("INSERT INTO "+biz+" (k) VALUES (?)", key).Error
	})
}

// TestCrashWorker is the process TestGroupCommitSurvivesKill kills: crashClients goroutines call
// every key of theirs again and again (new keys, then replays) until the process is killed.
func TestCrashWorker(t *testing.T) {
	name := os.Getenv(envCrashBackend)
	if name == "" {
		t.Skip("run by TestGroupCommitSurvivesKill")
	}
	var b backend
	for _, c := range append(backends, multiBackend) {
		if c.name == name {
			b = c
		}
	}
	db := b.db(t, nil)
	sqlDB, err := db.DB()
	must(t, err)
	sqlDB.SetMaxOpenConns(crashClients + 4)
	s, err := New(db, &Options{Table: os.Getenv(envCrashTable)})
	must(t, err)
	g := crashGuard(t, s)
	keys, err := strconv.Atoi(os.Getenv(envCrashKeys))
	must(t, err)
	biz := os.Getenv(envCrashBiz)
	var wg sync.WaitGroup
	for w := range crashClients {
		wg.Go(func() {
			for {
				for k := w; k < keys; k += crashClients {
					_, _ = crashCall(ctxb, g, db, biz, strconv.Itoa(k)) // in flight, fenced...: the next round retries
				}
			}
		})
	}
	wg.Wait()
}

// TestGroupCommitSurvivesKill: a process whose claims and finishes go out in batches (MariaDB and
// PostgreSQL) is killed with SIGKILL mid-flight, three times, restarted each time; then every key is
// retried until it answers. Every key ends SUCCEEDED with its own result, its business ran at least
// once, and a key whose record was SUCCEEDED when a process was killed never ran its business again.
func TestGroupCommitSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("kills worker processes")
	}
	for _, b := range []backend{backends[0], backends[1]} {
		t.Run(b.name, func(t *testing.T) {
			db := b.db(t, nil)
			s := newTable(t, db)
			if s.claims == nil || s.finishes == nil && b.name != backends[0].name {
				t.Fatalf("no group commit on %s", b.name)
			}
			biz := testsvc.Name("t_biz_")
			testsvc.DropTable(t, db, biz)
			must(t, db.Exec("CREATE TABLE "+biz+" (k VARCHAR(64) NOT NULL)").Error)
			succeeded := func() map[string]bool {
				var keys []string
				must(t, db.Raw("SELECT idem_key FROM "+s.Table()+" WHERE status = ?", string(idemkit.StatusSucceeded)).Scan(&keys).Error)
				out := make(map[string]bool, len(keys))
				for _, k := range keys {
					out[k] = true
				}
				return out
			}
			effects := func() map[string]int {
				var rows []struct {
					K string
					N int
				}
				must(t, db.Raw("SELECT k, COUNT(*) AS n FROM "+biz+" GROUP BY k").Scan(&rows).Error)
				out := make(map[string]int, len(rows))
				for _, r := range rows {
					out[r.K] = r.N
				}
				return out
			}

			// frozen holds, for each key SUCCEEDED when a worker was killed, its business rows then.
			frozen := map[string]int{}
			for kill := range crashKills {
				cmd := exec.Command(os.Args[0], "-test.run=^TestCrashWorker$", "-test.count=1", "-test.v")
				cmd.Env = append(os.Environ(), envCrashBackend+"="+b.name, envCrashTable+"="+s.Table(),
					envCrashBiz+"="+biz, envCrashKeys+"="+strconv.Itoa(crashKeys))
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				must(t, cmd.Start())
				t.Cleanup(func() { _ = cmd.Process.Kill() })
				want := (kill + 1) * crashKeys / (crashKills + 2)
				for i := 0; len(succeeded()) < want; i++ {
					if i > 600 {
						_ = cmd.Process.Kill()
						_ = cmd.Wait()
						t.Fatalf("worker %d: fewer than %d keys finished after a minute:\n%s", kill, want, out.String())
					}
					time.Sleep(100 * time.Millisecond)
				}
				time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond)
				must(t, cmd.Process.Kill()) // SIGKILL, its batches in flight
				_ = cmd.Wait()
				done, eff := succeeded(), effects()
				for k := range done {
					if _, ok := frozen[k]; !ok {
						frozen[k] = eff[k]
					}
				}
				t.Logf("kill %d: %d keys finished", kill+1, len(done))
			}

			// Every key, retried until it answers (claims of the killed processes expire with their lease).
			g := crashGuard(t, s)
			ctx, cancel := context.WithTimeout(ctxb, 2*time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			errs := make(chan error, crashClients)
			for w := range crashClients {
				wg.Go(func() {
					for k := w; k < crashKeys; k += crashClients {
						key := strconv.Itoa(k)
						for {
							res, err := crashCall(ctx, g, db, biz, key)
							var inFlight *idemkit.InFlightError
							if errors.As(err, &inFlight) && ctx.Err() == nil {
								time.Sleep(inFlight.RetryAfter + 10*time.Millisecond)
								continue
							}
							if err == nil && string(res.Value) != "r-"+key {
								err = fmt.Errorf("result %q", res.Value)
							}
							if err != nil {
								errs <- fmt.Errorf("key %s: %w", key, err)
								return
							}
							break
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			done, eff := succeeded(), effects()
			ran := 0
			for k := range crashKeys {
				key := strconv.Itoa(k)
				rec, err := s.Get(ctxb, crashScope, key)
				must(t, err)
				if rec.Status != idemkit.StatusSucceeded || string(rec.Response) != "r-"+key || !done[key] {
					t.Errorf("key %s: %s %q", key, rec.Status, rec.Response)
				}
				if eff[key] == 0 {
					t.Errorf("key %s: SUCCEEDED, its business never ran", key)
				}
				if n, ok := frozen[key]; ok && eff[key] != n {
					t.Errorf("key %s: SUCCEEDED at a kill with %d business rows, %d now", key, n, eff[key])
				}
				if eff[key] > 1 {
					ran++
				}
			}
			t.Logf("%d keys, %d finished before the last kill; %d ran their business more than once (killed between the business's commit and the finish, then taken over: Execute mode's documented window)",
				crashKeys, len(frozen), ran)
		})
	}
}
