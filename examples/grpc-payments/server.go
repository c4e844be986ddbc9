package main

import (
	"context"
	"errors"
	"net"

	"github.com/glebarez/sqlite"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/memory"
	"github.com/idemkit/idemkit/record"
)

// server is the guarded Payments service on a loopback port.
type server struct {
	addr string
	db   *gorm.DB
	grpc *grpc.Server
	runs int // business runs that reached the database (one goroutine at a time: SQLite serialises)
}

func newServer(ctx context.Context, path string) (*server, error) {
	db, err := gorm.Open(sqlite.Open(path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return nil, err
	}
	if err := db.WithContext(ctx).Exec("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)").Error; err != nil {
		return nil, err
	}
	if err := db.WithContext(ctx).Exec("CREATE TABLE ledger (id INTEGER PRIMARY KEY AUTOINCREMENT, account INTEGER NOT NULL, amount INTEGER NOT NULL)").Error; err != nil {
		return nil, err
	}
	if err := db.WithContext(ctx).Exec("INSERT INTO accounts (id, balance) VALUES (1, 100)").Error; err != nil {
		return nil, err
	}
	store, err := record.New(db, nil)
	if err != nil {
		return nil, err
	}
	if err := store.CreateTable(ctx); err != nil {
		return nil, err
	}
	guard, err := idemkit.New(store, &idemkit.Options{Locker: memory.NewLocker(nil)})
	if err != nil {
		return nil, err
	}

	s := &server{db: db}
	interceptor := grpcx.UnaryServerInterceptor(guard, &grpcx.Options{
		Required: func(string) bool { return true }, // Charge must carry a key
		// Tx mode: the Guard begins a transaction on the record Store's database, the handler writes
		// through it (grpcx.TxFromContext), the record is written once with the final answer, and
		// everything commits together.
		Tx: store,
	})
	s.grpc = grpc.NewServer(
		grpc.ChainUnaryInterceptor(interceptor),
		grpc.ForceServerCodecV2(grpcx.Codec{}), // replays byte for byte, maps included
	)
	s.grpc.RegisterService(serviceDesc(), s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.addr = ln.Addr().String()
	go func() { _ = s.grpc.Serve(ln) }()
	return s, nil
}

func (s *server) close() {
	s.grpc.Stop()
	if sqlDB, err := s.db.DB(); err == nil {
		_ = sqlDB.Close()
	}
}

// errInsufficientFunds is the business's permanent failure.
var errInsufficientFunds = errors.New("insufficient funds")

// Charge debits the account and writes a ledger row, through the transaction grpcx's Tx mode began.
func (s *server) Charge(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	tx := record.GormTx(grpcx.TxFromContext(ctx)) // the guard-owned transaction
	if tx == nil {
		return nil, status.Error(codes.Internal, "no transaction")
	}
	s.runs++
	account := int64(req.GetFields()["account"].GetNumberValue())
	amount := int64(req.GetFields()["amount"].GetNumberValue())
	if amount <= 0 {
		return nil, status.Error(codes.InvalidArgument, "amount must be positive")
	}
	res := tx.Exec("UPDATE accounts SET balance = balance - ? WHERE id = ? AND balance >= ?", amount, account, amount)
	if res.Error != nil {
		return nil, status.Error(codes.Unavailable, res.Error.Error()) // retryable: rolled back, not stored
	}
	if res.RowsAffected == 0 {
		// FAILED_PRECONDITION is permanent: stored and replayed with its details.
		st, err := status.New(codes.FailedPrecondition, errInsufficientFunds.Error()).
			WithDetails(&errdetails.ErrorInfo{Reason: "INSUFFICIENT_FUNDS", Domain: "payments.example"})
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		return nil, st.Err()
	}
	if err := tx.Exec("INSERT INTO ledger (account, amount) VALUES (?, ?)", account, amount).Error; err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	var id, balance int64
	if err := tx.Raw("SELECT last_insert_rowid()").Scan(&id).Error; err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if err := tx.Raw("SELECT balance FROM accounts WHERE id = ?", account).Scan(&balance).Error; err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return structpb.NewStruct(map[string]any{"ledger_id": id, "account": account, "amount": amount, "balance": balance})
}
