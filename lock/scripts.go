package lock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, run with EVALSHA and, when the server does not have them cached (after a restart
// or SCRIPT FLUSH), with EVAL ([redis.Script.Run]). They are built once; nothing loads them per request.
// Each script touches only the key passed to it as KEYS[1] and takes every value (tokens, results,
// times) as ARGV: no caller data is ever spliced into Lua source.
//
// release and refresh are compare-and-set operations that no native command does before Redis 8;
// acquire and fill stand in for SET ... NX ... GET and SET ... GET on servers that refuse them.
// inspect and forget are the operator's read and repair (Locker.State, Locker.Forget), never run by
// a Guard.
var (
	//go:embed acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(acquireLua)

	//go:embed fill.lua
	fillLua    string
	fillScript = redis.NewScript(fillLua)

	//go:embed refresh.lua
	refreshLua    string
	refreshScript = redis.NewScript(refreshLua)

	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)

	//go:embed inspect.lua
	inspectLua    string
	inspectScript = redis.NewScript(inspectLua)

	//go:embed forget.lua
	forgetLua    string
	forgetScript = redis.NewScript(forgetLua)
)
