package redisdriver

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

// luaFiles are the scripts: lib.lua, the shared library, and one file per
// script.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// luaFile is the text of lua/name.lua.
func luaFile(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err) // embedded: only a misspelt name gets here, at start-up
	}
	return string(b)
}

// Every script is the constants Go shares with Lua, the shared library, then
// its own body.
var (
	scriptAcquire  = newScript(luaFile("acquire"))
	scriptRenew    = newScript(luaFile("renew"))
	scriptRelease  = newScript(luaFile("release"))
	scriptEnqueue  = newScript(luaFile("enqueue"))
	scriptTake     = newScript(luaFile("take"))
	scriptAck      = newScript(luaFile("ack"))
	scriptUnlock   = newScript(luaFile("unlock"))
	scriptSweep    = newScript(luaFile("sweep"))
	scriptAnnounce = newScript(luaFile("announce"))
	scriptKnown    = newScript(luaFile("known"))
	scriptEpoch    = newScript(luaFile("epoch"))
	scriptProbe    = newScript(luaFile("probe"))
	scriptTick     = newScript(luaFile("tick"))
)

// luaPrelude begins every script: the shared constants, then lib.lua.
var luaPrelude = luaConstants() + luaFile("lib")

func newScript(body string) *redis.Script { return redis.NewScript(luaPrelude + body) }
