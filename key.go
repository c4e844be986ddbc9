package idemkit

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// hashedPrefix marks a stored scope or key that was too long and is kept as its SHA-256.
const hashedPrefix = "sha256:"

// ValidateKey checks s is usable as a key or scope: non-empty, at most max bytes, valid UTF-8, no
// control characters — the check every Guard call makes. The error wraps ErrInvalidKey and says what
// is wrong without echoing s.
func ValidateKey(s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(s) > max:
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidKey, len(s), max)
	}
	return checkText(s)
}

// checkText reports an ErrInvalidKey for invalid UTF-8 or a control character in s.
func checkText(s string) error {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return fmt.Errorf("%w: control character at byte %d", ErrInvalidKey, i)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 {
			return fmt.Errorf("%w: invalid UTF-8 at byte %d", ErrInvalidKey, i)
		}
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: control character at byte %d", ErrInvalidKey, i)
		}
		i += n
	}
	return nil
}

// StoredForm returns s as a Store keeps it: unchanged up to MaxStoredLen bytes, else [HashedForm]. A
// value that itself starts with "sha256:" is always hashed, so no literal key or scope can ever equal
// the hashed form of another.
func StoredForm(s string) string {
	if len(s) <= MaxStoredLen && !strings.HasPrefix(s, hashedPrefix) {
		return s
	}
	return HashedForm(s)
}

// HashedForm returns "sha256:" followed by the hex SHA-256 of s (71 bytes).
func HashedForm(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hashedPrefix + hex.EncodeToString(sum[:])
}

// IsHashedForm reports whether s is what [HashedForm] returns: "sha256:" and 64 lowercase hex
// digits — the stored form listings and metrics show of a long scope or key.
func IsHashedForm(s string) bool {
	h, ok := strings.CutPrefix(s, hashedPrefix)
	if !ok || len(h) != 2*sha256.Size {
		return false
	}
	for i := range len(h) {
		if c := h[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// PrincipalKey returns the key stored for a client's key sent by principal (a user, a tenant), for
// adapters that scope keys by caller (httpx and grpcx Options.Principal): "<len>:<principal>:<key>",
// or its "sha256:" hash form when that is longer than MaxStoredLen or not printable. The length
// prefix makes it unambiguous: no key sent by one principal (or an anonymous caller, principal "")
// can equal another principal's. Use it with Guard.Get to look such a record up.
func PrincipalKey(principal, key string) string {
	return DerivedKey(strconv.Itoa(len(principal)) + ":" + principal + ":" + key)
}

// DerivedKey returns s when a Guard would accept and store it as is (non-empty, at most MaxStoredLen
// bytes, UTF-8 without control characters, not starting with "sha256:"), else [HashedForm](s). Use it for keys built from request
// data, which may be anything.
func DerivedKey(s string) string {
	if s == "" || len(s) > MaxStoredLen || strings.HasPrefix(s, hashedPrefix) || checkText(s) != nil {
		return HashedForm(s)
	}
	return s
}

// StorableText returns s when every Store holds it as a fingerprint, gid or branch id (at most
// MaxStoredLen bytes of UTF-8 without NUL), else [HashedForm](s). Equal inputs give equal outputs, so
// it keeps a fingerprint comparable whatever computed it: use it on a fingerprint that may be a raw
// binary hash or a long canonical form, which a Guard refuses with ErrUnstorable.
func StorableText(s string) string {
	if checkStoredText(s) != nil {
		return HashedForm(s)
	}
	return s
}

// identity is a validated call's address in every backend.
type identity struct {
	scope, key string // stored forms
	lockKey    string // unambiguous scope+key for the Locker
}

// identify validates c and returns its address. On an error it still holds the stored scope when
// the scope itself is valid (the key or another field was refused), so that the refused call is
// observed under the scope's one label.
func (g *Guard) identify(c *Call) (identity, error) {
	scope := c.Scope
	if g.opts.Namespace != "" {
		scope = g.opts.Namespace + "/" + scope
	}
	if err := ValidateKey(c.Scope, g.opts.MaxKeyLen); err != nil {
		return identity{}, fmt.Errorf("scope: %w", err)
	}
	id := identity{scope: StoredForm(scope)}
	if err := ValidateKey(c.Key, g.opts.MaxKeyLen); err != nil {
		return id, err
	}
	for _, f := range [...]struct{ name, v string }{{"fingerprint", c.Fingerprint}, {"gid", c.GID}, {"branch id", c.BranchID}} {
		if err := checkStoredText(f.v); err != nil {
			return id, fmt.Errorf("idemkit: %s: %w: %w", f.name, ErrUnstorable, err)
		}
	}
	id.key = StoredForm(c.Key)
	id.lockKey = LockKey(id.scope, id.key)
	return id, nil
}

// checkStoredText checks a call's fingerprint, gid or branch id against what every Store holds: at most
// MaxStoredLen bytes of UTF-8 without NUL (the SQL stores keep them in text columns, which MariaDB
// and PostgreSQL refuse otherwise). Checked before anything runs: in Tx mode the record is written
// after the function, and a value the Store refuses then would cost a run on every retry.
func checkStoredText(v string) error {
	switch {
	case len(v) > MaxStoredLen:
		return fmt.Errorf("%d bytes, longer than %d", len(v), MaxStoredLen)
	case !utf8.ValidString(v):
		return errors.New("not valid UTF-8 (hex-encode a binary hash)")
	case strings.IndexByte(v, 0) >= 0:
		return errors.New("contains a NUL byte")
	}
	return nil
}

// newToken returns the random token of an attempt: 32 hexadecimal digits, followed, when the call
// gives a fingerprint, by "." and a 64-bit hash of it (16 digits). The token is the attempt's lock
// value and record owner; the hash lets a duplicate that meets the lock tell a different payload
// (ErrPayloadMismatch) from the same one in flight without reading the record (see holderOtherPayload).
func newToken(fingerprint string) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	if fingerprint == "" {
		return hex.EncodeToString(b[:])
	}
	var t [tokenLen + 1 + 16]byte
	hex.Encode(t[:tokenLen], b[:])
	t[tokenLen] = '.'
	var h [8]byte
	binary.BigEndian.PutUint64(h[:], fingerprintHash(fingerprint))
	hex.Encode(t[tokenLen+1:], h[:])
	return string(t[:])
}

// tokenLen is the length of a token's random part.
const tokenLen = 32

// fingerprintHash is FNV-1a, 64 bits: a stand-in for a fingerprint in a token. Equal fingerprints
// always hash alike; two that differ and collide (one in 2^64) are taken for the same payload, which
// the record, read later, still tells apart.
func fingerprintHash(fp string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(fp); i++ {
		h ^= uint64(fp[i])
		h *= 1099511628211
	}
	return h
}

// holderOtherPayload reports what holder, the token of the attempt that holds a key, tells of the
// payload of a call with fingerprint: known when the token carries a fingerprint's hash, and other
// when that is the hash of another fingerprint than the one given. A token without one (a call without
// a fingerprint, or a version of idemkit before the hash) tells nothing; nor does any token to a call
// without a fingerprint, which no payload differs from.
func holderOtherPayload(holder, fingerprint string) (other, known bool) {
	if fingerprint == "" || len(holder) != tokenLen+1+16 || holder[tokenLen] != '.' {
		return false, false
	}
	var h [8]byte
	if _, err := hex.Decode(h[:], []byte(holder[tokenLen+1:])); err != nil {
		return false, false
	}
	return binary.BigEndian.Uint64(h[:]) != fingerprintHash(fingerprint), true
}

// keyHash is a short, stable stand-in for a key in logs and traces.
func keyHash(scope, key string) string {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil)[:8])
}
