package chaosrpc

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/record"
)

// serverEnv carries a ServerConfig (JSON) to a server process.
const serverEnv = "IDEMKIT_CHAOSRPC_SERVER"

// ServerConfig configures one server.
type ServerConfig struct {
	Addr          string        `json:"addr"`          // listen address, 127.0.0.1:port
	DSN           string        `json:"dsn"`           // MariaDB DSN with the database
	Redis         string        `json:"redis"`         // Redis address; "" for no Locker
	LockPrefix    string        `json:"lock_prefix"`   // lock.Options.Prefix
	Tables        Tables        `json:"tables"`        //
	Lease         time.Duration `json:"lease"`         // idemkit Options.Lease
	LockTTL       time.Duration `json:"lock_ttl"`      // idemkit Options.LockTTL
	MaxDelay      time.Duration `json:"max_delay"`     // Business.MaxDelay
	Deterministic bool          `json:"deterministic"` // serve with grpcx.Codec
	Bare          bool          `json:"bare"`          // no guard: the business in a plain transaction (a baseline, and a sabotage)
}

// Server is a built gRPC server and what it holds.
type Server struct {
	GRPC  *grpc.Server
	Guard *idemkit.Guard
	close func()
}

// Close stops the server at once and closes its pools.
func (s *Server) Close() {
	s.GRPC.Stop()
	s.close()
}

// NewServer builds the guarded Payments server of cfg (Addr unused) on db; rdb may be nil.
func NewServer(db *gorm.DB, rdb redis.UniversalClient, cfg ServerConfig, runs func(string), extra ...grpc.ServerOption) (*Server, error) {
	store, err := record.New(db, &record.Options{Table: cfg.Tables.Records})
	if err != nil {
		return nil, err
	}
	opts := &idemkit.Options{Lease: cmp.Or(cfg.Lease, 10*time.Second), LockTTL: cfg.LockTTL, FailOpen: true}
	if rdb != nil {
		opts.Locker = lock.New(rdb, &lock.Options{Prefix: cfg.LockPrefix})
	}
	guard, err := idemkit.New(store, opts)
	if err != nil {
		return nil, err
	}
	icpt, err := grpcx.NewUnaryServerInterceptor(guard, &grpcx.Options{
		Key:      grpcx.FirstOf(grpcx.MetadataKeyFunc(grpcx.MetadataKey), grpcx.FieldKey(FieldKey)),
		Required: func(string) bool { return true },
		Tx:       store, // Tx mode: the Guard begins, runs Charge in the transaction, writes the record once, commits
	})
	if err != nil {
		return nil, err
	}
	if cfg.Bare {
		icpt = BareInterceptor(db)
	}
	sopts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(icpt)}
	if cfg.Deterministic {
		sopts = append(sopts, grpc.ForceServerCodecV2(grpcx.Codec{}))
	}
	gs := grpc.NewServer(append(sopts, extra...)...)
	gs.RegisterService(ServiceDesc(), &Business{Tables: cfg.Tables, MaxDelay: cfg.MaxDelay, Runs: runs})
	return &Server{GRPC: gs, Guard: guard, close: func() {}}, nil
}

// BareInterceptor runs each call's handler in a plain transaction on db, committed when the handler
// succeeds: the business without any guard.
func BareInterceptor(db *gorm.DB) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		var resp any
		err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			var err error
			resp, err = handler(context.WithValue(ctx, bareTxKey{}, tx), req)
			return err
		})
		return resp, err
	}
}

// OpenDB opens dsn with a silent gorm.
func OpenDB(dsn string) (*gorm.DB, error) {
	return gorm.Open(mysql.Open(dsn), &gorm.Config{Logger: logger.Discard})
}

// RunServerIfRequested serves as a server process when the harness started this process as one, and
// never returns then; otherwise it returns at once. Call it first in main (or TestMain).
func RunServerIfRequested() {
	raw := os.Getenv(serverEnv)
	if raw == "" {
		return
	}
	var cfg ServerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "chaosrpc server: bad config: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "chaosrpc server: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serve(ctx context.Context, cfg ServerConfig) error {
	_ = gomysql.SetLogger(log.New(io.Discard, "", 0))
	db, err := OpenDB(cfg.DSN)
	if err != nil {
		return err
	}
	var rdb *redis.Client
	if cfg.Redis != "" {
		rdb = redis.NewClient(&redis.Options{Addr: cfg.Redis, ContextTimeoutEnabled: true})
		defer rdb.Close()
	}
	var s *Server
	if rdb != nil {
		s, err = NewServer(db, rdb, cfg, nil)
	} else {
		s, err = NewServer(db, nil, cfg, nil)
	}
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		s.GRPC.GracefulStop()
	}()
	return s.GRPC.Serve(ln)
}
