package httpx

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/memory"
)

// TestEveryProblemHasATitle: the 405 head-not-guarded problem (a HEAD on a route whose GET is
// guarded) went out with "title":"", the one problem type the titles did not name, though RFC 9457
// has "title" summarise the type and every other problem carries one (found by a defect hunt).
// Every problem type now has its title.
func TestEveryProblemHasATitle(t *testing.T) {
	g, err := idemkit.New(memory.NewStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := Middleware(g, &Options{Methods: []string{http.MethodGet}})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest(http.MethodHead, "/branch", nil)
	r.Header.Set(DefaultHeader, `"k"`)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	var p struct {
		Type, Title string
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("HEAD: %d %q (%v); want 405 problem", rec.Code, rec.Body, err)
	}
	if p.Title == "" {
		t.Errorf("HEAD: problem %s has no title: %s", p.Type, rec.Body)
	}

	for _, typ := range []string{ProblemMissingKey, ProblemInvalidKey, ProblemBadBody, ProblemDuplicateMember,
		ProblemPrincipal, ProblemInFlight, ProblemDuplicate, ProblemTokenInvalid, ProblemResponseNotStored,
		ProblemRejected, ProblemHeadNotGuarded, ProblemBodyTooLarge, ProblemPayloadMismatch, ProblemInternal,
		ProblemUnavailable} {
		if problemTitles[typ] == "" {
			t.Errorf("problem %s has no title", typ)
		}
	}
}
