package chaosrpc

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit/grpcx"
)

// Defaults of [Config].
const (
	DefaultDSN      = "root:@tcp(127.0.0.1:3306)/idemkit_test"
	DefaultRedis    = "127.0.0.1:6379"
	DefaultServers  = 2
	DefaultClients  = 8
	DefaultOps      = 2000
	DefaultDupRate  = 0.3
	DefaultKills    = 6
	DefaultMaxDelay = 30 * time.Millisecond
	accounts        = 10
	poorAccount     = accounts // its balance is 0: every charge is refused (FAILED_PRECONDITION)
	initialBalance  = int64(1) << 40
)

// Config configures [Run]. The zero value works.
type Config struct {
	DSN        string        // MariaDB with the database; defaults to DefaultDSN
	Redis      string        // Redis for the Locker of every other server (see Run); defaults to DefaultRedis; "-" for none
	Servers    int           // server processes; defaults to DefaultServers
	Clients    int           // concurrent clients; defaults to DefaultClients
	Ops        int           // logical calls; defaults to DefaultOps
	DupRate    float64       // share of calls that repeat an earlier key; defaults to DefaultDupRate
	Kills      int           // SIGKILLs of server processes spread over the load; defaults to DefaultKills, negative none
	MaxDelay   time.Duration // longest pause between a call's writes and its commit; defaults to DefaultMaxDelay
	OpTimeout  time.Duration // how long a client keeps retrying one logical call; defaults to 60s
	Seed       uint64        // seed of the load; 0 from the clock
	Prefix     string        // table and lock prefix; defaults to a fresh one
	KeepTables bool          // keep the tables (default: dropped when the run passed)
	Bare       bool          // serve without the guard, to show the checker catches duplicate effects
	Logf       func(format string, args ...any)
}

// Report is what a run did and found.
type Report struct {
	Ops          int      `json:"ops"`            // logical calls
	Keys         int      `json:"keys"`           // distinct keys
	Duplicates   int      `json:"duplicates"`     // logical calls that repeated a key
	Attempts     int64    `json:"attempts"`       // RPCs sent, retries included
	Replayed     int64    `json:"replayed"`       // answers marked idempotent-replayed
	Aborted      int64    `json:"aborted"`        // ABORTED (in flight) answers, each with RetryInfo
	Unavailable  int64    `json:"unavailable"`    // transport failures and UNAVAILABLE answers
	Kills        int      `json:"kills"`          // server processes SIGKILLed
	KillsMidCall int      `json:"kills_mid_call"` // kills with calls outstanding on the killed server
	NoLocker     int      `json:"no_locker"`      // server slots serving without the Locker
	Succeeded    int      `json:"succeeded"`      // keys answered OK
	Rejected     int      `json:"rejected"`       // keys answered with a permanent status
	Mismatches   int      `json:"mismatches"`     // probes with a reused key and another payload
	LedgerRows   int      `json:"ledger_rows"`    // effects in the business table
	Violations   []string `json:"violations"`
}

// Summary renders the report.
func (r *Report) Summary() string {
	s := fmt.Sprintf("grpc chaos: %d calls (%d keys, %d duplicates), %d RPCs, %d replayed, %d ABORTED, %d unavailable\n"+
		"  %d server kills (%d mid-call), %d servers without the Locker, %d keys OK, %d rejected, %d mismatch probes, %d ledger rows\n"+
		"  violations: %d\n", r.Ops, r.Keys, r.Duplicates, r.Attempts, r.Replayed, r.Aborted, r.Unavailable,
		r.Kills, r.KillsMidCall, r.NoLocker, r.Succeeded, r.Rejected, r.Mismatches, r.LedgerRows, len(r.Violations))
	for i, v := range r.Violations {
		if i == 20 {
			s += fmt.Sprintf("  ... and %d more\n", len(r.Violations)-20)
			break
		}
		s += "  - " + v + "\n"
	}
	return s
}

// op is one logical call.
type op struct {
	key     string
	account int
	amount  int64
}

// answer is a call's final answer: the raw response bytes, or the encoded status.
type answer struct {
	code codes.Code
	raw  []byte // response as received (OK) or the deterministic google.rpc.Status (error)
	resp *structpb.Struct
}

// Run runs the gRPC chaos scenario and checks it. It returns an error when the harness could not run;
// violations are in the Report.
func Run(ctx context.Context, c *Config) (*Report, error) {
	cfg := *c
	cfg.DSN = cmp.Or(cfg.DSN, DefaultDSN)
	cfg.Redis = cmp.Or(cfg.Redis, DefaultRedis)
	cfg.Servers = cmp.Or(cfg.Servers, DefaultServers)
	cfg.Clients = cmp.Or(cfg.Clients, DefaultClients)
	cfg.Ops = cmp.Or(cfg.Ops, DefaultOps)
	cfg.DupRate = cmp.Or(cfg.DupRate, DefaultDupRate)
	cfg.Kills = cmp.Or(cfg.Kills, DefaultKills)
	cfg.MaxDelay = cmp.Or(cfg.MaxDelay, DefaultMaxDelay)
	cfg.OpTimeout = cmp.Or(cfg.OpTimeout, 60*time.Second)
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "grpcchaos" + strconv.FormatUint(rand.Uint64()&0xffffff, 16)
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b9))

	db, err := OpenDB(cfg.DSN)
	if err != nil {
		return nil, err
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	tables := NewTables(cfg.Prefix)
	if err := tables.Create(ctx, db, accounts, initialBalance); err != nil {
		_ = tables.Drop(context.Background(), db)
		return nil, fmt.Errorf("creating tables: %w", err)
	}
	if err := db.Exec("UPDATE "+tables.Accounts+" SET balance = 0 WHERE id = ?", poorAccount).Error; err != nil {
		return nil, err
	}
	rep := &Report{}
	defer func() {
		if len(rep.Violations) == 0 && !cfg.KeepTables {
			_ = tables.Drop(context.Background(), db)
		}
	}()
	redisAddr := cfg.Redis
	if redisAddr == "-" {
		redisAddr = ""
	}
	if redisAddr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
		defer func() {
			// The lock prefix is this run's: remove what it left.
			it := rdb.Scan(context.Background(), 0, cfg.Prefix+":*", 1000).Iterator()
			for it.Next(context.Background()) {
				rdb.Del(context.Background(), it.Val())
			}
			_ = rdb.Close()
		}()
	}

	// Servers. With more than one, every other slot serves without the Locker: its duplicates meet
	// the others' in the database only — two runs of the business in concurrent transactions, the
	// record's INSERT deciding which commits —, a path the Locker would otherwise keep from ever
	// being taken.
	procs := make([]*serverProc, cfg.Servers)
	for i := range procs {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		slotRedis := redisAddr
		if i%2 == 1 {
			slotRedis = ""
		}
		if slotRedis == "" {
			rep.NoLocker++
		}
		procs[i] = &serverProc{cfg: ServerConfig{
			Addr: addr, DSN: cfg.DSN, Redis: slotRedis, LockPrefix: cfg.Prefix + ":", Tables: tables,
			Lease: 10 * time.Second, LockTTL: 2 * time.Second, MaxDelay: cfg.MaxDelay, Deterministic: true, Bare: cfg.Bare,
		}}
		if err := procs[i].start(ctx); err != nil {
			for _, p := range procs[:i] {
				p.kill()
			}
			return nil, err
		}
	}
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	logf("grpc chaos: %d servers, %d clients, %d calls, seed %d", cfg.Servers, cfg.Clients, cfg.Ops, cfg.Seed)

	// The load: keys, 30 % of the calls repeat a recent key with the same payload.
	ops := make([]op, cfg.Ops)
	var keys []op
	for i := range ops {
		if len(keys) > 0 && rng.Float64() < cfg.DupRate {
			window := min(len(keys), 16)
			ops[i] = keys[len(keys)-1-rng.IntN(window)]
			rep.Duplicates++
			continue
		}
		o := op{key: fmt.Sprintf("%s-k%d", cfg.Prefix, len(keys)), account: 1 + rng.IntN(accounts-1), amount: 1 + rng.Int64N(1000)}
		switch r := rng.Float64(); {
		case r < 0.03:
			o.account = poorAccount // refused: FAILED_PRECONDITION, stored
		case r < 0.05:
			o.amount = 0 // poison: INVALID_ARGUMENT, stored
		}
		keys = append(keys, o)
		ops[i] = o
	}
	rep.Ops, rep.Keys = len(ops), len(keys)

	conns := make([]*grpc.ClientConn, len(procs))
	for i, p := range procs {
		cc, err := grpc.NewClient(p.cfg.Addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 300 * time.Millisecond},
				MinConnectTimeout: time.Second,
			}),
			grpc.WithChainUnaryInterceptor(grpcx.UnaryClientInterceptor(nil)))
		if err != nil {
			return nil, err
		}
		defer cc.Close()
		conns[i] = cc
	}

	// The killer.
	loadDone := make(chan struct{})
	var killWG sync.WaitGroup
	var killErr error
	if cfg.Kills > 0 {
		killWG.Add(1)
		go func() {
			defer killWG.Done()
			krng := rand.New(rand.NewPCG(cfg.Seed, 7))
			// Spread the kills over the expected length of the load (measured as it goes).
			for k := 0; k < cfg.Kills; k++ {
				select {
				case <-loadDone:
					return
				case <-ctx.Done():
					return
				case <-time.After(time.Duration(300+krng.IntN(900)) * time.Millisecond):
				}
				p := procs[krng.IntN(len(procs))]
				// Wait (briefly) for a moment with calls outstanding on it: a kill mid-call.
				for range 100 {
					if p.inflight.Load() > 0 {
						break
					}
					time.Sleep(time.Millisecond)
				}
				mid := p.inflight.Load() > 0
				p.kill()
				rep.Kills++
				if mid {
					rep.KillsMidCall++
				}
				logf("grpc chaos: killed server %s (calls outstanding: %v)", p.cfg.Addr, mid)
				if err := p.start(ctx); err != nil {
					killErr = fmt.Errorf("restarting server: %w", err)
					return
				}
			}
		}()
	}

	// The clients.
	answers := make(map[string][]answer)
	var amu sync.Mutex
	var attempts, replayed, aborted, unavailable atomic.Int64
	work := make(chan op)
	var wg sync.WaitGroup
	var vmu sync.Mutex
	violate := func(format string, args ...any) {
		vmu.Lock()
		rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
		vmu.Unlock()
	}
	for ci := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			crng := rand.New(rand.NewPCG(cfg.Seed, uint64(ci)+100))
			for o := range work {
				a, ok := callUntilFinal(ctx, cfg.OpTimeout, o, conns, procs, crng, &attempts, &replayed, &aborted, &unavailable, violate)
				if !ok {
					violate("key %s: no final answer within %s", o.key, cfg.OpTimeout)
					continue
				}
				amu.Lock()
				answers[o.key] = append(answers[o.key], a)
				amu.Unlock()
			}
		}()
	}
	for _, o := range ops {
		select {
		case work <- o:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	close(loadDone)
	killWG.Wait()
	if killErr != nil {
		return rep, killErr
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	rep.Attempts, rep.Replayed, rep.Aborted, rep.Unavailable = attempts.Load(), replayed.Load(), aborted.Load(), unavailable.Load()

	// Probes: a finished key with another payload is FAILED_PRECONDITION with a PreconditionFailure.
	// They wait for the server to be ready: one killed last may have just been restarted, its
	// connection still backing off, and a call failing fast would answer UNAVAILABLE for the
	// transport, not the server.
	for _, o := range keys[:min(len(keys), 20)] {
		probe := o
		probe.amount += 1000
		pctx, cancel := context.WithTimeout(grpcx.WithKey(ctx, o.key), cfg.OpTimeout)
		_, err := Charge(pctx, conns[0], request(probe), grpc.WaitForReady(true))
		cancel()
		rep.Mismatches++
		st := status.Convert(err)
		if st.Code() != codes.FailedPrecondition || !hasDetail[*errdetails.PreconditionFailure](st) {
			violate("key %s reused with another payload: got %v, want FAILED_PRECONDITION with PreconditionFailure", o.key, err)
		}
	}

	// The checker reads through a pool of its own, with plain SQL (see check).
	sqlDB, err := sql.Open("mysql", cfg.DSN)
	if err != nil {
		return rep, err
	}
	defer sqlDB.Close()
	check(ctx, sqlDB, tables, keys, answers, rep, violate)
	logf("grpc chaos: done")
	return rep, nil
}

// request is the request of o.
func request(o op) *structpb.Struct {
	s, _ := structpb.NewStruct(map[string]any{FieldKey: o.key, FieldAccount: float64(o.account), FieldAmount: float64(o.amount)})
	return s
}

// callUntilFinal calls o with its key until it gets a final answer (OK or a permanent status),
// retrying transport failures, UNAVAILABLE and ABORTED on any server.
func callUntilFinal(ctx context.Context, timeout time.Duration, o op, conns []*grpc.ClientConn, procs []*serverProc,
	rng *rand.Rand, attempts, replayed, aborted, unavailable *atomic.Int64, violate func(string, ...any)) (answer, bool) {
	deadline := time.Now().Add(timeout)
	ctx = grpcx.WithKey(ctx, o.key) // one key for every attempt of this logical call
	req := request(o)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		i := rng.IntN(len(conns))
		var hdr metadata.MD
		rec := &rawCodec{}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		procs[i].inflight.Add(1)
		resp, err := Charge(cctx, conns[i], req, grpc.Header(&hdr), grpc.ForceCodecV2(rec))
		procs[i].inflight.Add(-1)
		cancel()
		attempts.Add(1)
		if len(hdr.Get(grpcx.ReplayedKey)) > 0 {
			replayed.Add(1)
		}
		st := status.Convert(err)
		switch st.Code() {
		case codes.OK:
			return answer{code: codes.OK, raw: rec.raw, resp: resp}, true
		case codes.InvalidArgument, codes.FailedPrecondition:
			b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(st.Proto())
			return answer{code: st.Code(), raw: b}, true
		case codes.Aborted:
			aborted.Add(1)
			delay := 50 * time.Millisecond
			if ri, ok := detail[*errdetails.RetryInfo](st); ok {
				delay = min(ri.GetRetryDelay().AsDuration(), 500*time.Millisecond)
			} else {
				violate("key %s: ABORTED without RetryInfo: %v", o.key, err)
			}
			time.Sleep(delay)
		default: // UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED (a killed server), INTERNAL: retry
			unavailable.Add(1)
			time.Sleep(time.Duration(10+rng.IntN(40)) * time.Millisecond)
		}
	}
	return answer{}, false
}

// detail returns st's first detail of type T.
func detail[T proto.Message](st *status.Status) (T, bool) {
	for _, d := range st.Details() {
		if t, ok := d.(T); ok {
			return t, true
		}
	}
	var zero T
	return zero, false
}

func hasDetail[T proto.Message](st *status.Status) bool {
	_, ok := detail[T](st)
	return ok
}
