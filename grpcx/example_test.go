package grpcx_test

import (
	"context"
	"log"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcx"
	"github.com/idemkit/idemkit/record"
)

// A server whose Create method runs at most once per idempotency key, in Tx mode: the Guard begins a
// transaction on the record Store's database, the handler writes through it, and its writes and the
// stored response commit together.
func ExampleUnaryServerInterceptor() {
	db, err := gorm.Open(mysql.Open("root:@tcp(127.0.0.1:3306)/shop"), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	store, err := record.New(db, nil) // the record table lives in the business database
	if err != nil {
		log.Fatal(err)
	}
	guard, err := idemkit.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpcx.UnaryServerInterceptor(guard, &grpcx.Options{
			Required: func(method string) bool { return method == "/shop.Orders/Create" }, // INVALID_ARGUMENT without a key
			Tx:       store,                                                               // Tx mode: the Guard owns the transaction
		})),
		grpc.ForceServerCodecV2(grpcx.Codec{}), // replays are byte for byte the original answer
	)
	// Register the services; their handlers write like createOrder.
	defer srv.Stop()
}

// createOrder is a handler guarded in Tx mode: it writes through the transaction the Guard began
// (it neither commits nor rolls back), and returns its answer, stored with the writes.
func createOrder(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	tx := record.GormTx(grpcx.TxFromContext(ctx))
	if tx == nil {
		return nil, status.Error(codes.Internal, "not in a Tx-mode call")
	}
	item := req.GetFields()["item"].GetStringValue()
	if item == "" {
		return nil, status.Error(codes.InvalidArgument, "item is required") // permanent: stored, replayed
	}
	if err := tx.Exec("INSERT INTO orders (item) VALUES (?)", item).Error; err != nil {
		return nil, status.Errorf(codes.Unavailable, "writing the order: %v", err) // retryable: rolled back
	}
	return structpb.NewStruct(map[string]any{"item": item, "status": "created"})
}

// A client whose calls carry one idempotency key each, reused by gRPC's retries, and an application
// retry loop that keeps one key for all its attempts.
func ExampleUnaryClientInterceptor() {
	cc, err := grpc.NewClient("127.0.0.1:50051",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(grpcx.UnaryClientInterceptor(nil)))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()

	req, err := structpb.NewStruct(map[string]any{"item": "book", "qty": 1})
	if err != nil {
		log.Fatal(err)
	}
	ctx, _ := grpcx.WithNewKey(context.Background()) // one key for the whole loop
	resp := new(structpb.Struct)
	for attempt := 1; attempt <= 5; attempt++ {
		err = cc.Invoke(ctx, "/shop.Orders/Create", req, resp)
		switch status.Code(err) {
		case codes.Unavailable, codes.Aborted: // not stored, or still running: retry, same key
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
			continue
		}
		break // OK (first answer or replay), or a permanent error (replayed the same every time)
	}
	if err != nil {
		log.Print(err)
	}
}
