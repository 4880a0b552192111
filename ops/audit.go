package ops

import (
	"context"
	"encoding/json"
	"os"
	"os/user"
	"time"

	"github.com/rewind-dev/rewind/store"
)

// Actor is who gives a command, and from where.
type Actor struct {
	// Who is a sign-in's label, "token" for a client that sent the token,
	// "cli" for the command line.
	Who string
	// From is the remote address of a request, or user@host for the CLI.
	From string
}

// CLI is the actor of a command given on this machine's command line.
func CLI() Actor {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	return Actor{Who: "cli", From: name + "@" + host}
}

// Entry is one command to record: Action (clear, mark.success,
// backfill.pause, ...), its Target (a pipeline's name, a backfill's id),
// the Pipeline it concerns, its arguments, and the error it ended with
// (nil: ok).
type Entry struct {
	Action, Target, Pipeline string
	Args                     map[string]any
	Err                      error
}

// Record adds e, given by a, to the state's audit trail.
func Record(ctx context.Context, st interface {
	RecordAudit(context.Context, store.AuditEntry) error
}, a Actor, e Entry) error {
	if e.Args == nil {
		e.Args = map[string]any{}
	}
	args, err := json.Marshal(e.Args)
	if err != nil {
		return err
	}
	result := "ok"
	if e.Err != nil {
		result = e.Err.Error()
	}
	return st.RecordAudit(context.WithoutCancel(ctx), store.AuditEntry{At: time.Now(), Who: a.Who, From: a.From, Action: e.Action,
		Target: e.Target, Pipeline: e.Pipeline, Args: string(args), Result: result})
}

// AuditJSON is one entry of `rewind audit --json` (contract): when (RFC
// 3339, UTC), who, from where, the action, its target, its arguments and
// its result ("ok" or the error).
type AuditJSON struct {
	At     string          `json:"at"`
	Who    string          `json:"who"`
	From   string          `json:"from"`
	Action string          `json:"action"`
	Target string          `json:"target"`
	Args   json.RawMessage `json:"args"`
	Result string          `json:"result"`
}

// Audit lists the audit trail, newest first: of one pipeline ("" every
// one) and one target ("" every one), at most limit entries (0: 1000).
func Audit(ctx context.Context, st interface {
	ListAudit(context.Context, store.ListAuditParams) ([]store.AuditEntry, error)
}, pipeline, target string, limit int) ([]AuditJSON, error) {
	list, err := st.ListAudit(ctx, store.ListAuditParams{Pipeline: pipeline, Target: target, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]AuditJSON, len(list))
	for i, e := range list {
		args := json.RawMessage(e.Args)
		if !json.Valid(args) {
			args = json.RawMessage("{}")
		}
		out[i] = AuditJSON{At: e.At.UTC().Format(time.RFC3339), Who: e.Who, From: e.From, Action: e.Action, Target: e.Target, Args: args, Result: e.Result}
	}
	return out, nil
}
