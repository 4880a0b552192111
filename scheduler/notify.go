package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
)

// notifyAll sends a backfill's report to every notify block: its command
// gets the report on stdin and its path in $REWIND_REPORT; its webhook gets
// a JSON POST. Every block is tried; the errors are joined.
func notifyAll(ctx context.Context, ws *dsl.Workspace, b store.Backfill, failed bool, path, report string) error {
	state := "success"
	if failed {
		state = "failed"
	}
	var errs []error
	for _, n := range ws.Notifies {
		cmd, err := n.Command()
		if err != nil {
			errs = append(errs, fmt.Errorf("notify %s: %w", n.Name, err))
		} else if cmd != nil {
			c := exec.CommandContext(ctx, cmd.Argv[0], cmd.Argv[1:]...)
			c.Dir = cmd.Dir
			c.Stdin = strings.NewReader(report)
			c.Env = append(os.Environ(), "REWIND_REPORT="+path, "REWIND_BACKFILL_ID="+b.ID, "REWIND_BACKFILL_STATE="+state, "REWIND_PIPELINE="+b.Pipeline)
			for k, v := range cmd.Env {
				c.Env = append(c.Env, k+"="+v)
			}
			if out, err := c.CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("notify %s: %w: %s", n.Name, err, bytes.TrimSpace(out)))
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

// webhookBody is the JSON a notify webhook receives.
type webhookBody struct {
	ID       string `json:"id"`
	Pipeline string `json:"pipeline"`
	Start    string `json:"start"`
	End      string `json:"end"`
	State    string `json:"state"`
	Report   string `json:"report"` // Markdown
}

func postReport(ctx context.Context, url string, b store.Backfill, state, report string) error {
	body, err := json.Marshal(webhookBody{ID: b.ID, Pipeline: b.Pipeline, Start: b.From.Format(dateOnly), End: b.To.Format(dateOnly), State: state, Report: report})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("webhook %s answered %s", url, resp.Status)
	}
	return nil
}
