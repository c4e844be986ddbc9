package barrier

import (
	"errors"
	"fmt"
	"testing"
)

// replyError is an error reply as go-redis returns it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// TestUnavailableReplies: the error replies by which Redis says it cannot serve now, as Redis 7 and
// Redis 6 word them for a script, are outages; the business's own replies and other errors are not.
func TestUnavailableReplies(t *testing.T) {
	for msg, want := range map[string]bool{
		"LOADING Redis is loading the dataset in memory":                                                              true,
		"READONLY You can't write against a read only replica. script: 092f, on @user_script:36.":                     true,
		"OOM command not allowed when used memory > 'maxmemory'. script: 092f, on @user_script:36.":                   true,
		"ERR Error running script (call to f_092f): @user_script:36: -OOM command not allowed when used memory":       true,
		"ERR Error running script (call to f_092f): @user_script:36: -READONLY You can't write against a read only r": true,
		"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.":                            true,
		"NOREPLICAS Not enough good replicas to write.":                                                               true,
		"CLUSTERDOWN The cluster is down":                                                                             true,
		"TRYAGAIN Multiple keys request during rehashing of slot":                                                     true,
		"MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.":            true,
		"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.":                    true,
		"ERR max number of clients reached":                                                                           true,
		"FAILURE: insufficient balance":                                                                               false,
		"ERR user_script:3: attempt to compare nil with number":                                                       false,
		"BUSYKEY Target key name already exists.":                                                                     false,
		"WRONGTYPE Operation against a key holding the wrong kind of value":                                           false,
	} {
		if got := unavailable(fmt.Errorf("wrapped: %w", replyError(msg))); got != want {
			t.Errorf("unavailable(%q) = %v, want %v", msg, got, want)
		}
	}
	if unavailable(errors.New("LOADING but not a reply")) {
		t.Error("an error that is not a reply is not one of the server's")
	}
}
