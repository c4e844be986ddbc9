package chaosrpc

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/record"
)

// Tables names one run's tables in the test database.
type Tables struct {
	Accounts string `json:"accounts"`
	Ledger   string `json:"ledger"`
	Records  string `json:"records"`
}

// NewTables returns the table names of a run whose names start with prefix.
func NewTables(prefix string) Tables {
	return Tables{Accounts: prefix + "_accounts", Ledger: prefix + "_ledger", Records: prefix + "_records"}
}

// Create creates the tables and accounts 1..n with balance each. The ledger has no unique key on
// op_key on purpose: one row per key is the interceptor's promise, not the schema's.
func (t Tables) Create(ctx context.Context, db *gorm.DB, n int, balance int64) error {
	stmts := []string{
		"CREATE TABLE " + t.Accounts + " (id INT NOT NULL PRIMARY KEY, balance BIGINT NOT NULL) ENGINE=InnoDB",
		"CREATE TABLE " + t.Ledger + ` (
			id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
			op_key VARBINARY(128) NOT NULL,
			account INT NOT NULL,
			amount BIGINT NOT NULL,
			pid INT NOT NULL,
			KEY idx_op_key (op_key)
		) ENGINE=InnoDB`,
	}
	for _, s := range stmts {
		if err := db.WithContext(ctx).Exec(s).Error; err != nil {
			return err
		}
	}
	for i := 1; i <= n; i++ {
		if err := db.WithContext(ctx).Exec("INSERT INTO "+t.Accounts+" (id, balance) VALUES (?, ?)", i, balance).Error; err != nil {
			return err
		}
	}
	store, err := record.New(db, &record.Options{Table: t.Records})
	if err != nil {
		return err
	}
	return store.CreateTable(ctx)
}

// Drop drops the tables.
func (t Tables) Drop(ctx context.Context, db *gorm.DB) error {
	return db.WithContext(ctx).Exec("DROP TABLE IF EXISTS " + t.Accounts + ", " + t.Ledger + ", " + t.Records).Error
}

// bareTxKey is the context key of the transaction BareInterceptor opened.
type bareTxKey struct{}

// txOf returns the transaction a Charge runs in: the guard-owned one of grpcx's Tx mode, or the
// bare interceptor's.
func txOf(ctx context.Context) *gorm.DB {
	if tx := record.GormTx(grpcx.TxFromContext(ctx)); tx != nil {
		return tx
	}
	tx, _ := ctx.Value(bareTxKey{}).(*gorm.DB)
	return tx
}

// Business is the Charge method: debit an account and write a ledger row, in the transaction grpcx's
// Tx mode began (or the bare interceptor's).
type Business struct {
	Tables Tables
	// MaxDelay is the longest pause between the writes and the commit (a window for kills).
	MaxDelay time.Duration
	// Runs counts the business runs that reached the database, when set.
	Runs func(key string)
}

// Request field names.
const (
	FieldKey     = "order_id"
	FieldAccount = "account"
	FieldAmount  = "amount"
	FieldFail    = "fail"     // "unavailable": a retryable failure before any write
	FieldSleep   = "sleep_ms" // a pause before the writes
)

// Charge debits amount from account. It answers INVALID_ARGUMENT (with a BadRequest detail) for a
// non-positive amount and FAILED_PRECONDITION (with an ErrorInfo detail) when the balance is too low:
// both permanent, stored and replayed. fail=unavailable answers UNAVAILABLE (retryable).
func (b *Business) Charge(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	tx := txOf(ctx)
	if tx == nil {
		return nil, status.Error(codes.Internal, "chaosrpc: no transaction in the context")
	}
	f := req.GetFields()
	key := f[FieldKey].GetStringValue()
	account := int64(f[FieldAccount].GetNumberValue())
	amount := int64(f[FieldAmount].GetNumberValue())
	if b.Runs != nil {
		b.Runs(key)
	}
	if ms := f[FieldSleep].GetNumberValue(); ms > 0 {
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if f[FieldFail].GetStringValue() == "unavailable" {
		return nil, status.Error(codes.Unavailable, "chaosrpc: asked to fail")
	}
	if amount <= 0 {
		st, _ := status.New(codes.InvalidArgument, "amount must be positive").WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: FieldAmount, Description: fmt.Sprintf("%d is not positive", amount)}},
		})
		return nil, st.Err()
	}
	res := tx.Exec("UPDATE "+b.Tables.Accounts+" SET balance = balance - ? WHERE id = ? AND balance >= ?", amount, account, amount)
	if res.Error != nil {
		return nil, status.Errorf(codes.Unavailable, "debiting: %v", res.Error)
	}
	if res.RowsAffected == 0 {
		st, _ := status.New(codes.FailedPrecondition, "insufficient funds").WithDetails(&errdetails.ErrorInfo{
			Reason: "INSUFFICIENT_FUNDS", Domain: "chaos.idemkit", Metadata: map[string]string{"account": fmt.Sprint(account)},
		})
		return nil, st.Err()
	}
	if err := tx.Exec("INSERT INTO "+b.Tables.Ledger+" (op_key, account, amount, pid) VALUES (?, ?, ?, ?)",
		key, account, amount, os.Getpid()).Error; err != nil {
		return nil, status.Errorf(codes.Unavailable, "writing ledger: %v", err)
	}
	var id int64
	if err := tx.Raw("SELECT LAST_INSERT_ID()").Scan(&id).Error; err != nil {
		return nil, status.Errorf(codes.Unavailable, "reading ledger id: %v", err)
	}
	if b.MaxDelay > 0 {
		select {
		case <-time.After(rand.N(b.MaxDelay)):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return structpb.NewStruct(map[string]any{
		"ledger_id": float64(id), FieldKey: key, FieldAccount: float64(account), FieldAmount: float64(amount),
		"pid": float64(os.Getpid()),
	})
}
