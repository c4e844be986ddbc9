package httpx

import (
	"context"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
)

// TestFormat1EncodedResponseNotReplayedPlain: format 1 (written before v2 of the stored form) kept
// Content-Encoding with the other allow-listed fields, and with it the body the handler had
// compressed. The replay drops Content-Encoding (never replayed since), so a duplicate of such a
// request got the compressed bytes labelled as plain. Such a record is now read as a response whose
// body was encoded by its handler: 409 response-not-stored, never bytes the client cannot read
// (found by a defect hunt).
func TestFormat1EncodedResponseNotReplayedPlain(t *testing.T) {
	g := memoryGuard(t, nil)
	body := gzipped(t, `{"id":1}`, time.Unix(1700000000, 0))
	v1 := binary.AppendUvarint([]byte{1, 0}, 201) // format 1, no flags, status
	v1 = binary.AppendUvarint(v1, 2)              // fields
	for _, f := range [][2]string{{"Content-Type", "application/json"}, {"Content-Encoding", "gzip"}} {
		v1 = binary.AppendUvarint(v1, uint64(len(f[0])))
		v1 = append(v1, f[0]...)
		v1 = binary.AppendUvarint(v1, uint64(len(f[1])))
		v1 = append(v1, f[1]...)
	}
	v1 = append(v1, body...)

	r := req("POST", "/orders", "k-v1", `{"n":1}`)
	call := idemkit.Call{Scope: DefaultScope(r), Key: "k-v1"}
	if _, err := g.Do(context.Background(), call, func(context.Context) ([]byte, error) { return v1, nil }); err != nil {
		t.Fatal(err)
	}
	ran := false
	h := Middleware(g, &Options{NoFingerprint: true})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran = true
		w.WriteHeader(http.StatusCreated)
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if ran {
		t.Fatal("the handler ran for a key already processed")
	}
	if ce := rec.Header().Get("Content-Encoding"); rec.Code == http.StatusCreated && ce == "" && rec.Body.String() == body {
		t.Fatalf("replayed the gzip body without its Content-Encoding (Content-Type %q)", rec.Header().Get("Content-Type"))
	}
	if rec.Code != http.StatusConflict || problemType(rec) != ProblemResponseNotStored {
		t.Fatalf("got %d %q, want 409 %s", rec.Code, problemType(rec), ProblemResponseNotStored)
	}
}
