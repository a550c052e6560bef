package llmrate

import "strings"

// ReservedWorkspacePrefix begins the workspaces of package upstream's
// provider keys (the workspace "upstream:"+Name holds a key's buckets). The
// middleware and the limits endpoint refuse a request whose workspace
// begins with it (after extraction: the API key itself, when each key is
// its own workspace, the default) with a 401, code "invalid_api_key",
// before the store is asked, so a Limiter and an upstream.Transport may
// share one store without a caller reaching a provider key's buckets. The
// prefix is matched exactly (case-sensitively) at the start of the
// workspace only.
const ReservedWorkspacePrefix = "upstream:"

// reservedMsg is the 401's message for a reserved workspace. It never
// repeats the key.
const reservedMsg = `Incorrect API key provided: workspace names beginning "` + ReservedWorkspacePrefix + `" are reserved (by default a key is its own workspace).`

// reservedWorkspace reports whether ws is reserved for package upstream.
func reservedWorkspace(ws string) bool { return strings.HasPrefix(ws, ReservedWorkspacePrefix) }
