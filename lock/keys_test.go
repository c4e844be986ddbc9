package lock

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum of Redis Cluster.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// keySlot is the Redis Cluster slot of key, following the cluster specification: when the key has a
// '{' followed later by a '}' with at least one byte between them, only those bytes are hashed.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key)) % 16384
}

func TestKeySlotReference(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for key, want := range map[string]int{
		"foo": 12182, "bar": 5061, "{user1000}.following": keySlot("user1000"),
		"foo{}{bar}": keySlot("foo{}{bar}"), "foo{{bar}}zap": keySlot("{bar"), "foo{bar}{zap}": keySlot("bar"),
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
	if keySlot("foo{}{bar}") == keySlot("bar") {
		t.Error("an empty hash tag must hash the whole key")
	}
}

// trickyKeys are keys whose braces, percent signs or emptiness could break a naive hash tag.
var trickyKeys = []string{
	"k", "", "}", "}}", "}x", "x}", "a}b", "{", "{{", "a{b", "{a}", "{}", "a{}b", "x{y}z", "%", "%}", "%%",
	"%7D", "}%", "12:POST /orders:key-1", "ключ{}", strings.Repeat("}{", 64),
}

func TestKeysSameSlot(t *testing.T) {
	l := &Locker{prefix: DefaultPrefix}
	seen := make(map[string]string)
	for _, key := range trickyKeys {
		keys := l.keys(key, true)
		lockKey, resultKey := keys[0], keys[1]
		if !strings.HasPrefix(lockKey, DefaultPrefix+"{") || !strings.HasSuffix(lockKey, "}:lock") {
			t.Errorf("lock key of %q = %q, want %s{...}:lock", key, lockKey, DefaultPrefix)
		}
		if !strings.HasSuffix(resultKey, "}:result") || strings.TrimSuffix(lockKey, "lock") != strings.TrimSuffix(resultKey, "result") {
			t.Errorf("result key of %q = %q, does not match lock key %q", key, resultKey, lockKey)
		}
		if a, b := keySlot(lockKey), keySlot(resultKey); a != b {
			t.Errorf("key %q: lock key %q in slot %d, result key %q in slot %d", key, lockKey, a, resultKey, b)
		}
		if tagOf(lockKey) == "" {
			t.Errorf("key %q: lock key %q has no hash tag", key, lockKey)
		}
		if other, dup := seen[lockKey]; dup {
			t.Errorf("keys %q and %q both map to %q", other, key, lockKey)
		}
		seen[lockKey] = key
		if only := l.keys(key, false); len(only) != 1 || only[0] != lockKey {
			t.Errorf("keys(%q, false) = %q, want [%q]", key, only, lockKey)
		}
	}
	// Keys the Locker leaves alone are used verbatim.
	if got := l.keys("order-1", true); got[0] != "idemkit:{order-1}:lock" || got[1] != "idemkit:{order-1}:result" {
		t.Errorf("keys(order-1) = %q", got)
	}
}

// tagOf returns the hash tag of a Redis key, "" when it has none.
func tagOf(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return ""
}

func FuzzKeysSameSlot(f *testing.F) {
	for _, k := range trickyKeys {
		f.Add(k)
	}
	l := &Locker{prefix: "app:"}
	f.Fuzz(func(t *testing.T, key string) {
		keys := l.keys(key, true)
		if tagOf(keys[0]) == "" || keySlot(keys[0]) != keySlot(keys[1]) {
			t.Fatalf("key %q: %q and %q are in slots %d and %d", key, keys[0], keys[1], keySlot(keys[0]), keySlot(keys[1]))
		}
		// Injective: the key is recoverable from its lock key.
		got := strings.TrimSuffix(strings.TrimPrefix(keys[0], "app:{"), "}:lock")
		if got != key && got != "%"+key {
			t.Fatalf("key %q: lock key %q does not hold it", key, keys[0])
		}
		if got == "%"+key && key != "" && key[0] != '}' && key[0] != '%' {
			t.Fatalf("key %q escaped needlessly", key)
		}
	})
}

func BenchmarkKeys(b *testing.B) {
	l := &Locker{prefix: DefaultPrefix}
	b.ReportAllocs()
	for b.Loop() {
		_ = l.keys("12:POST /orders:3f2a9c1e-5b7d-4e1a-9c2b-8d7e6f5a4b3c", true)
	}
}

var _ Scripter = (*redis.Client)(nil)
