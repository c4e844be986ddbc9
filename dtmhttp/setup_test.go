package dtmhttp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/barrier"
	"github.com/idemkit/idemkit/dtmhttp"
	"github.com/idemkit/idemkit/internal/testsvc"
	"github.com/idemkit/idemkit/lock"
)

var ctxb = context.Background()

const initBalance = 100

// transfer is the branch payload of the tests.
type transfer struct {
	Amount int `json:"amount"`
}

// journal collects the handler's events and log lines.
type journal struct {
	mu     sync.Mutex
	events []dtmhttp.Event
	logs   bytes.Buffer
}

func (j *journal) observe(_ context.Context, e *dtmhttp.Event) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.events = append(j.events, *e)
}

func (j *journal) Write(p []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.logs.Write(p)
}

func (j *journal) log() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.logs.String()
}

// outcomes lists "op:status:outcome" of every event so far.
func (j *journal) outcomes() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []string
	for _, e := range j.events {
		o := "-"
		if e.Outcome != 0 {
			o = e.Outcome.String()
		}
		out = append(out, fmt.Sprintf("%s:%d:%s", e.Op, e.Status, o))
	}
	return out
}

// bundle is a bank on MariaDB behind a gorm barrier, a Redis Locker, and the Branches under test.
type bundle struct {
	db     *gorm.DB
	bar    *barrier.Gorm
	accts  string
	rdb    *redis.Client
	locker *lock.Locker
	b      *dtmhttp.Branches
	j      *journal

	mu   sync.Mutex
	runs int // business runs that reached the database
}

// setup returns a bundle on the test MariaDB (opened with cfg, nil for the default) and Redis, with
// its own tables and lock prefix, all removed when t ends. opts may be nil; the bundle sets Locker,
// Logger and Observe unless opts sets them.
func setup(t *testing.T, cfg *gorm.Config, opts *dtmhttp.Options) *bundle {
	t.Helper()
	k := &bundle{db: testsvc.MySQL(t, cfg), rdb: testsvc.Redis(t), j: &journal{}}
	table := testsvc.Name("bar_")
	testsvc.DropTable(t, k.db, table)
	var err error
	if k.bar, err = barrier.NewGorm(k.db, &barrier.GormOptions{Table: table}); err != nil {
		t.Fatal(err)
	}
	if err := k.bar.CreateTable(ctxb); err != nil {
		t.Fatal(err)
	}
	k.accts = testsvc.Name("acct_")
	testsvc.DropTable(t, k.db, k.accts)
	if err := k.db.Exec("CREATE TABLE " + k.accts + " (id int PRIMARY KEY, balance int NOT NULL)").Error; err != nil {
		t.Fatal(err)
	}
	if err := k.db.Exec("INSERT INTO "+k.accts+" (id, balance) VALUES (1, ?)", initBalance).Error; err != nil {
		t.Fatal(err)
	}
	prefix := testsvc.Name("idemkit_dtmhttp_") + ":"
	testsvc.CleanRedis(t, k.rdb, prefix)
	k.locker = lock.New(k.rdb, &lock.Options{Prefix: prefix})

	o := dtmhttp.Options{}
	if opts != nil {
		o = *opts
	}
	if o.Locker == nil {
		o.Locker = k.locker
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(k.j, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if o.Observe == nil {
		o.Observe = k.j.observe
	}
	if k.b, err = dtmhttp.New(&o); err != nil {
		t.Fatal(err)
	}
	return k
}

// adjust is the business: balance += sign*amount, refused (permanently) below zero.
func (k *bundle) adjust(sign int) dtmhttp.GormFunc[transfer] {
	return func(ctx context.Context, tx *gorm.DB, p transfer) error {
		if _, ok := dtmhttp.RequestFromContext(ctx); !ok {
			return errors.New("no Request in the business's context")
		}
		k.mu.Lock()
		k.runs++
		k.mu.Unlock()
		res := tx.Exec("UPDATE "+k.accts+" SET balance = balance + ? WHERE id = 1 AND balance + ? >= 0", sign*p.Amount, sign*p.Amount)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return idemkit.Permanent(errors.New("insufficient balance"))
		}
		return nil
	}
}

func (k *bundle) runCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.runs
}

func (k *bundle) balance(t *testing.T) int {
	t.Helper()
	var bal int
	if err := k.db.Raw("SELECT balance FROM " + k.accts + " WHERE id = 1").Scan(&bal).Error; err != nil {
		t.Fatal(err)
	}
	return bal
}

// call is one branch call.
type call struct {
	transType, gid, branchID, op string
	body                         string
}

func (c call) request() *http.Request {
	q := url.Values{}
	for k, v := range map[string]string{"trans_type": c.transType, "gid": c.gid, "branch_id": c.branchID, "op": c.op} {
		if v != "" {
			q.Set(k, v)
		}
	}
	q.Set("dtm", "http://127.0.0.1:1/api/dtmsvr")
	var body io.Reader = http.NoBody
	method := http.MethodGet
	if c.body != "" {
		body, method = strings.NewReader(c.body), http.MethodPost
	}
	r := httptest.NewRequest(method, "/branch?"+q.Encode(), body)
	r.Header.Set("Content-Type", "application/json")
	return r
}

// deliver serves c with h and returns the status and body.
func deliver(t *testing.T, h http.Handler, c call) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, c.request())
	return rec.Code, rec.Body.String()
}

func expect(t *testing.T, h http.Handler, c call, status int, bodyHas string) string {
	t.Helper()
	code, body := deliver(t, h, c)
	if code != status || !strings.Contains(body, bodyHas) {
		t.Fatalf("%s %s: answered %d %s; want %d with %q", c.op, c.gid, code, body, status, bodyHas)
	}
	return body
}

func expectOutcomes(t *testing.T, j *journal, want ...string) {
	t.Helper()
	if got := j.outcomes(); !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}
