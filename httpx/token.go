package httpx

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit"
)

// Defaults of [TokenOptions].
const (
	// DefaultTokenHeader carries a one-time token on the guarded request.
	DefaultTokenHeader = "X-Idempotent-Token"
	// DefaultTokenTTL is how long an issued token may be used.
	DefaultTokenTTL = 30 * time.Minute
)

// tokenPrefix starts every token, so a malformed one is refused before any store round trip.
const tokenPrefix = "itk_"

// tokenLen is the length of a token: the prefix and 32 random bytes in unpadded base64url.
var tokenLen = len(tokenPrefix) + base64.RawURLEncoding.EncodedLen(32)

// TokenStore keeps issued one-time tokens. It sees only the SHA-256 of a token (id), never the
// token. Implementations must be safe for concurrent use; [MemoryTokenStore] and package
// httpx/redistoken provide two.
type TokenStore interface {
	// Put stores value under id for ttl.
	Put(ctx context.Context, id string, value []byte, ttl time.Duration) error
	// Take removes the value stored under id and returns it, atomically: of concurrent Takes of one
	// id at most one gets the value. It returns idemkit.ErrNotFound when id is absent or expired.
	Take(ctx context.Context, id string) ([]byte, error)
}

// TokenOptions configure [Tokens]. The zero value works.
type TokenOptions struct {
	// TTL is how long an issued token may be used. Defaults to DefaultTokenTTL (30m).
	TTL time.Duration
	// Header is the request header carrying the token. Defaults to DefaultTokenHeader.
	Header string
	// Principal, when set, binds each token to the caller who asked for it: [Tokens.Handler] and
	// [Tokens.Key] call it, and a token presented by another caller is refused (and burnt).
	// Defaults to none.
	Principal func(r *http.Request) (string, error)
	// Now is the clock for expiry times reported to clients. Defaults to time.Now.
	Now func() time.Time
}

// Tokens issues one-time idempotency tokens and consumes them atomically: the form-resubmission
// pattern where a client first asks for a token, then sends it with the request, and any second use
// of the token is refused. Only a hash of each token is stored; the principal binding is compared
// in constant time. Tokens is safe for concurrent use.
type Tokens struct {
	store TokenStore
	opts  TokenOptions
}

// NewTokens returns a token service over store. It returns an error when store is nil or an
// option is invalid.
func NewTokens(store TokenStore, opts *TokenOptions) (*Tokens, error) {
	if store == nil {
		return nil, errors.New("httpx: nil TokenStore")
	}
	var o TokenOptions
	if opts != nil {
		o = *opts
	}
	o.TTL = cmp.Or(o.TTL, DefaultTokenTTL)
	o.Header = cmp.Or(o.Header, DefaultTokenHeader)
	if o.Now == nil {
		o.Now = time.Now
	}
	switch {
	case o.TTL < time.Millisecond:
		return nil, fmt.Errorf("httpx: invalid token options: TTL must be at least 1ms, got %s", o.TTL)
	case !isToken(o.Header):
		return nil, fmt.Errorf("httpx: invalid token options: Header %q is not a header name", o.Header)
	}
	return &Tokens{store: store, opts: o}, nil
}

// Token is an issued one-time token.
type Token struct {
	Token     string    `json:"token"`
	Header    string    `json:"header"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Issue creates a token for principal ("" when tokens are not bound to callers). It returns store
// errors wrapped in idemkit.ErrStoreUnavailable.
func (t *Tokens) Issue(ctx context.Context, principal string) (Token, error) {
	var raw [32]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails (Go 1.24+)
	tok := tokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	id := tokenID(tok)
	// Counted from before the Put: the store counts the TTL from when it stores the token, and the
	// client must not be told a later expiry than that (by the time the Put took).
	expires := t.opts.Now().Add(t.opts.TTL).UTC()
	if err := t.store.Put(ctx, id, principalTag(principal), t.opts.TTL); err != nil {
		return Token{}, fmt.Errorf("%w: issuing token: %w", idemkit.ErrStoreUnavailable, err)
	}
	return Token{Token: tok, Header: t.opts.Header, ExpiresAt: expires}, nil
}

// Consume uses token up for principal. It returns nil exactly once per issued token within its TTL;
// afterwards, for an unknown token, or for a token issued to another principal, ErrTokenInvalid.
// A malformed token gives an error wrapping idemkit.ErrInvalidKey, a store failure one wrapping
// idemkit.ErrStoreUnavailable.
func (t *Tokens) Consume(ctx context.Context, token, principal string) error {
	if len(token) != tokenLen || !strings.HasPrefix(token, tokenPrefix) {
		return fmt.Errorf("%w: malformed token", idemkit.ErrInvalidKey)
	}
	if _, err := base64.RawURLEncoding.DecodeString(token[len(tokenPrefix):]); err != nil {
		return fmt.Errorf("%w: malformed token", idemkit.ErrInvalidKey)
	}
	v, err := t.store.Take(ctx, tokenID(token))
	switch {
	case errors.Is(err, idemkit.ErrNotFound):
		return ErrTokenInvalid
	case err != nil:
		return fmt.Errorf("%w: consuming token: %w", idemkit.ErrStoreUnavailable, err)
	case subtle.ConstantTimeCompare(v, principalTag(principal)) != 1:
		return fmt.Errorf("%w: issued to another principal", ErrTokenInvalid)
	}
	return nil
}

// Key is the [KeySource] for tokens: it reads the token from the header (Options.Header), consumes
// it, and yields "token:" and the token's hash as the key, so the token itself is stored nowhere. A
// request without the header has no key; a second use is refused with 409 (ErrTokenInvalid).
//
// The token is consumed when the key is read, before the body is checked and the handler runs (once
// per request: a middleware nested in the one that consumed it reads the same key), so
// any request that presents it spends it — one refused before the handler (413, 400, 503) or failed by
// it (5xx) included — and a retry needs a new token: tokens reject resubmissions, they do not replay.
// For retries that get the original response, use the Idempotency-Key header.
func (t *Tokens) Key() KeySource {
	return func(r *http.Request) (string, error) {
		vals := r.Header.Values(t.opts.Header)
		switch len(vals) {
		case 0:
			return "", nil
		case 1:
		default:
			return "", fmt.Errorf("%w: %s %w", idemkit.ErrInvalidKey, t.opts.Header, errMultipleKeys)
		}
		tok, err := ParseKey(vals[0])
		if err != nil {
			return "", err
		}
		id := tokenID(tok)
		st := stateOf(r)
		if key, ok := st.spentKey(t, id); ok {
			// Consumed for this very request by a middleware around this one (or an earlier
			// source): the same key, not a second use.
			return markDerived(r, key), nil
		}
		principal, err := t.principal(r)
		if err != nil {
			return "", err
		}
		if err := t.Consume(r.Context(), tok, principal); err != nil {
			return "", err
		}
		key := "token:" + id
		if st != nil {
			st.spent = &spentToken{tokens: t, id: id, key: key}
		}
		return markDerived(r, key), nil
	}
}

// Handler returns an http.Handler that issues one token per GET or POST request and answers 200
// with JSON {"token", "header", "expiresAt"}, the token also in the response header, and
// Cache-Control: no-store. Other methods get 405; a store failure 503; a refused principal 403.
// Mounted behind the middleware on a guarded method, its response (the live token) is never stored:
// the request's claim is released as for a retryable failure, nothing is replayed, and a retry with
// the key is issued a new token. A handler of the application's that writes [Tokens.Issue]'s token in
// a guarded response has it stored and replayed in plain text, as any response: do not guard one.
func (t *Tokens) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodPost {
			w.Header().Set("Allow", "GET, POST")
			http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
			return
		}
		principal, err := t.principal(r)
		if err != nil {
			http.Error(w, http.StatusText(http.StatusForbidden), http.StatusForbidden)
			return
		}
		tok, err := t.Issue(r.Context(), principal)
		if err != nil {
			http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
			return
		}
		// Behind the middleware (a guarded method with a key) the response is not stored: the
		// record would hold the live token in plain text, and replay it to whoever sends the key.
		for st := stateOf(r); st != nil; st = st.outer {
			st.tokenIssued.Store(true)
		}
		body, _ := json.Marshal(tok)
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Length", strconv.Itoa(len(body)))
		h.Set(t.opts.Header, tok.Token)
		_, _ = w.Write(body)
	})
}

func (t *Tokens) principal(r *http.Request) (string, error) {
	if t.opts.Principal == nil {
		return "", nil
	}
	p, err := t.opts.Principal(r)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrPrincipal, err)
	}
	return p, nil
}

// tokenID is the hex SHA-256 of a token: the only form the store sees. Tokens carry 256 random
// bits, so an unsalted fast hash is enough.
func tokenID(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// principalTag is the stored binding of a token to a principal.
func principalTag(principal string) []byte {
	sum := sha256.Sum256([]byte("idemkit-token-principal\x00" + principal))
	return sum[:]
}
