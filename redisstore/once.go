package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// onceScripter is the store's redis.Scripter: every script call goes to
// Redis as one command that go-redis sends once and never again itself,
// whatever the client's MaxRetries. The store does its own resending, with
// identities and within WithTimeout (attempt, hedged); go-redis's retries
// would add nothing safe to it and take the time its hedges need.
//
// Measured (cmd/llmrate-spill -scenarios silent -fallback=false on a
// client with ContextTimeoutEnabled and go-redis's default MaxRetries, 3):
// an inline first attempt whose reply was silenced timed out at its own
// deadline, half the call's time, and go-redis then retried it itself,
// sleeping its backoff (8 ms and up) and timing out again at once, its
// deadline gone, until the call's context ended: 105 of 189 silenced
// calls failed open, none hedged. With go-redis's retries off (MaxRetries
// −1, docs/redis.md's client) the same run failed none open.
//
// A command without an identity must not be resent either: go-redis's
// retry of one whose reply was lost after Redis ran it would apply it
// twice.
type onceScripter struct{ c redis.UniversalClient }

// onceCmd is a script call go-redis sends once: it never retries a command
// whose NoRetry is true (redis.Cmder).
type onceCmd struct{ *redis.Cmd }

// NoRetry implements redis.Cmder: go-redis sends the call once.
func (onceCmd) NoRetry() bool { return true }

func (o onceScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return o.eval(ctx, "eval", script, keys, args)
}

func (o onceScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return o.eval(ctx, "evalsha", sha1, keys, args)
}

func (o onceScripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return o.eval(ctx, "eval_ro", script, keys, args)
}

func (o onceScripter) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return o.eval(ctx, "evalsha_ro", sha1, keys, args)
}

func (o onceScripter) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return o.c.ScriptExists(ctx, hashes...)
}

func (o onceScripter) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return o.c.ScriptLoad(ctx, script)
}

// eval builds the command as go-redis's own Eval and EvalSha do (the
// arguments in order, the first key at 3 for a cluster's routing, a
// NOSCRIPT reply as redis.ErrNoScript, so Script.Run loads the script) and
// sends it once.
func (o onceScripter) eval(ctx context.Context, name, payload string, keys []string, args []any) *redis.Cmd {
	cmdArgs := make([]any, 3+len(keys), 3+len(keys)+len(args))
	cmdArgs[0] = name
	cmdArgs[1] = payload
	cmdArgs[2] = len(keys)
	for i, k := range keys {
		cmdArgs[3+i] = k
	}
	cmdArgs = appendArgs(cmdArgs, args)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	_ = o.c.Process(ctx, onceCmd{cmd})
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd.SetErr(redis.ErrNoScript)
	}
	return cmd
}

// appendArgs appends args as go-redis's commands do: a lone []string or
// []any argument stands for its elements.
func appendArgs(dst, args []any) []any {
	if len(args) == 1 {
		switch a := args[0].(type) {
		case []string:
			for _, s := range a {
				dst = append(dst, s)
			}
			return dst
		case []any:
			return append(dst, a...)
		}
	}
	return append(dst, args...)
}
