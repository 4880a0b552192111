package backfill

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	neturl "net/url"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/executor/procenv"
	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/store"
)

// notifyAll sends a backfill's report to every notify block that gets
// backfill_report (every block that sets no on): its command
// gets the report on stdin and its path in $REWIND_REPORT; its webhook gets
// a JSON POST. Every block is tried; the errors are joined.
func notifyAll(ctx context.Context, ws *dsl.Workspace, b store.Backfill, failed bool, path, report string) error {
	state := "success"
	if failed {
		state = "failed"
	}
	var errs []error
	for _, n := range ws.Notifies {
		if !n.Wants(dsl.EventBackfillReport) {
			continue
		}
		cmd, err := n.Command()
		if err != nil {
			errs = append(errs, fmt.Errorf("notify %s: %w", n.Name, err))
		} else if cmd != nil {
			env := procenv.Of(cmd.Pass, []string{"REWIND_REPORT=" + path, "REWIND_BACKFILL_ID=" + b.ID, "REWIND_BACKFILL_STATE=" + state, "REWIND_PIPELINE=" + b.Pipeline}, procenv.Pairs(cmd.Env))
			o, err := executor.Run(ctx, executor.Command{Argv: cmd.Argv, Dir: cmd.Dir, Env: env,
				Stdin: strings.NewReader(report), Timeout: notifyTimeout})
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("notify %s: %w", n.Name, err))
			case !o.Success():
				msg := fmt.Sprintf("notify %s: command %s", n.Name, o.Describe())
				if line := skew.LastLine(append(o.Stdout, o.Stderr...)); line != "" {
					msg += ": " + ws.Redact(line)
				}
				errs = append(errs, errors.New(msg))
			}
		}
		if n.Webhook != "" {
			if err := postReport(ctx, n.Webhook, b, state, report); err != nil {
				errs = append(errs, fmt.Errorf("notify %s: %w", n.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// notifyTimeout bounds a notify block's command.
const notifyTimeout = 5 * time.Minute

// webhookBody is the JSON a notify webhook receives.
type webhookBody struct {
	ID       string `json:"id"`
	Pipeline string `json:"pipeline"`
	Start    string `json:"start"`
	End      string `json:"end"`
	State    string `json:"state"`
	Report   string `json:"report"` // Markdown
}

// postReport POSTs the report to a notify block's webhook. Its errors name
// the webhook by scheme and host only (dsl.RedactURL): the path and query
// of a webhook often carry a token, and these errors are printed, logged
// and stored in the state.
func postReport(ctx context.Context, url string, b store.Backfill, state, report string) error {
	body, err := json.Marshal(webhookBody{ID: b.ID, Pipeline: b.Pipeline, Start: b.From.Format(skew.DateOnly), End: b.To.Format(skew.DateOnly), State: state, Report: report})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return webhookError(url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return webhookError(url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("webhook %s answered %s", dsl.RedactURL(url), resp.Status)
	}
	return nil
}

// webhookError is err of a request to the webhook raw, with every part of
// raw but its scheme and host redacted: a *url.Error (what net/http
// returns, "Post \"https://...\": ...") keeps its type, Op and cause (for
// errors.Is: context.DeadlineExceeded), with its URL redacted.
func webhookError(raw string, err error) error {
	shown := dsl.RedactURL(raw)
	var ue *neturl.Error
	if errors.As(err, &ue) {
		return &neturl.Error{Op: ue.Op, URL: shown, Err: redactedCause(raw, ue.Err)}
	}
	return fmt.Errorf("webhook %s: %w", shown, redactedCause(raw, err))
}

// redactedCause is err, or an error of the same text with the webhook's
// URL (or its path, query, or user info) replaced, when its text holds them.
func redactedCause(raw string, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	red := msg
	parts := []string{raw}
	if u, perr := neturl.Parse(raw); perr == nil {
		for _, p := range []string{u.RequestURI(), u.EscapedPath(), u.Path, u.RawQuery, u.Fragment, u.User.String()} {
			if p != "" && p != "/" {
				parts = append(parts, p)
			}
		}
	}
	for _, p := range parts {
		red = strings.ReplaceAll(red, p, dsl.RedactedMarker)
	}
	if red == msg {
		return err
	}
	return &redactedErr{msg: red, err: err}
}

// redactedErr is an error whose text was redacted; errors.Is and
// errors.As still see the original.
type redactedErr struct {
	msg string
	err error
}

func (e *redactedErr) Error() string { return e.msg }
func (e *redactedErr) Unwrap() error { return e.err }
