package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	neturl "net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/executor"
	"github.com/rewind-dev/rewind/executor/procenv"
	"github.com/rewind-dev/rewind/skew"
	"github.com/rewind-dev/rewind/store"
)

const (
	// MaxAge is how long a notification is tried before it is given up.
	MaxAge = 24 * time.Hour
	// claimMargin is what a claim lasts beyond the longest send: a
	// deliverer claims one notification at a time, for its block's
	// timeout twice (command, then webhook) and this margin.
	claimMargin = 15 * time.Second
	// Backoff between tries: 5 s, doubled each try, at most a minute.
	firstRetry = 5 * time.Second
	maxRetry   = time.Minute
)

// Retry is how long a notification waits after its tries-th failed try.
func Retry(tries int) time.Duration {
	d := firstRetry
	for i := 1; i < tries && d < maxRetry; i++ {
		d *= 2
	}
	return min(d, maxRetry)
}

// Deliverer sends the state's due notifications to the workspace's notify
// blocks.
type Deliverer struct {
	Store     store.Store
	Workspace *dsl.Workspace
	Owner     string // unique per process: holds its claims
	Log       *slog.Logger
	// UIURL is rewind ui's base URL for links (default $REWIND_UI_URL).
	UIURL string
	// Stopping, when set and true, ends a round before it claims another
	// notification (the one being sent is sent to its end).
	Stopping func() bool
}

// Result is what one round did.
type Result struct {
	Delivered, Retried, GaveUp int
	Errors                     []string // one per failed send, redacted
}

// Round claims the due notifications, sends each, and records what became
// of it. A notification whose claim was lost meanwhile (this process was
// frozen past it) is left to the deliverer that holds it now.
func (d *Deliverer) Round(ctx context.Context) (Result, error) {
	var res Result
	base := strings.TrimRight(d.UIURL, "/")
	if base == "" {
		base = strings.TrimRight(os.Getenv(EnvUIURL), "/")
	}
	// Round-robin over the blocks, one notification of each at a time: a
	// claim lasts for one send of its block (its timeout, twice: command
	// or webhook), a deliverer that dies leaves one notification per
	// block to wait for it, and a block that hangs costs the others one
	// timeout per turn, not one per notification. Last, the notifications
	// of blocks the workspace no longer declares: given up.
	blocks := d.Workspace.Notifies
	var names []string
	for _, b := range blocks {
		names = append(names, b.Name)
	}
	done := make([]bool, len(blocks)+1) // nothing more due of that block
	for turn := 0; ctx.Err() == nil; turn++ {
		i := turn % len(done)
		if i == 0 && turn > 0 && !slices.Contains(done, false) {
			break
		}
		if done[i] {
			continue
		}
		if d.Stopping != nil && d.Stopping() {
			break
		}
		cp := store.ClaimNotificationsParams{Owner: d.Owner, For: claimMargin, Limit: 1, Except: names}
		if i < len(blocks) {
			cp = store.ClaimNotificationsParams{Owner: d.Owner, For: 2*blocks[i].Timeout + claimMargin, Limit: 1, Notify: blocks[i].Name}
		}
		claimed, err := d.Store.ClaimNotifications(ctx, cp)
		if err != nil {
			return res, err
		}
		if len(claimed) == 0 {
			done[i] = true
			continue
		}
		n := claimed[0]
		p := store.FinishNotificationParams{ID: n.ID, Owner: d.Owner}
		serr := d.send(ctx, n, withLink(n.Payload, base))
		switch {
		case serr == nil:
			p.Delivered = true
			res.Delivered++
		case errors.Is(serr, errGone) || time.Since(n.CreatedAt) > MaxAge:
			p.GiveUp, p.Error = true, serr.Error()
			res.GaveUp++
			res.Errors = append(res.Errors, serr.Error())
			d.log().Error("notification given up", "event", n.Event, "notify", n.Notify, "pipeline", n.Pipeline, "key", n.Key, "tries", n.Tries+1, "error", serr.Error())
		default:
			p.Error, p.RetryIn = serr.Error(), Retry(n.Tries+1)
			res.Retried++
			res.Errors = append(res.Errors, serr.Error())
			d.log().Warn("notification not delivered: trying again", "event", n.Event, "notify", n.Notify, "pipeline", n.Pipeline, "key", n.Key, "tries", n.Tries+1, "in", p.RetryIn, "error", serr.Error())
		}
		if ferr := d.Store.FinishNotification(context.WithoutCancel(ctx), p); ferr != nil && !errors.Is(ferr, store.ErrConflict) {
			return res, ferr
		}
		if p.Delivered {
			d.log().Info("notification delivered", "event", n.Event, "notify", n.Notify, "pipeline", n.Pipeline, "key", n.Key)
		}
	}
	return res, ctx.Err()
}

// Loop runs rounds every interval until ctx ends; a round that fails (the
// state unreachable) is logged and tried again at the next.
func (d *Deliverer) Loop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := d.Round(ctx); err != nil && ctx.Err() == nil {
			d.log().Warn("cannot deliver notifications: trying again", "error", d.Workspace.RedactError(err), "in", every)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *Deliverer) log() *slog.Logger {
	if d.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return d.Log
}

// errGone: the notification names a notify block the workspace no longer
// declares, or that no longer gets its event.
var errGone = errors.New("no such notify block")

// send delivers one notification to its block: the command (payload on
// stdin) and the webhook (payload POSTed); both must succeed.
func (d *Deliverer) send(ctx context.Context, n store.Notification, body []byte) error {
	blk := d.Workspace.Notify(n.Notify)
	if blk == nil {
		return fmt.Errorf("notify %s: %w in the workspace any more", n.Notify, errGone)
	}
	if !blk.Wants(n.Event) {
		return fmt.Errorf("notify %s: %w: it no longer gets %s", n.Notify, errGone, n.Event)
	}
	switch n.Channel {
	case ChannelCommand:
		cmd, err := blk.Command()
		if err != nil {
			return errors.New(d.Workspace.Redact(err.Error()))
		}
		if cmd == nil {
			return fmt.Errorf("notify %s: %w: it sets no command any more", n.Notify, errGone)
		}
		env := procenv.Of(cmd.Pass, []string{
			"REWIND_EVENT=" + n.Event, "REWIND_NOTIFICATION_KEY=" + payloadKey(n), "REWIND_PIPELINE=" + n.Pipeline,
		}, procenv.Pairs(cmd.Env))
		o, err := executor.Run(ctx, executor.Command{Argv: cmd.Argv, Dir: cmd.Dir, Env: env, Stdin: bytes.NewReader(body), Timeout: blk.Timeout})
		switch {
		case err != nil:
			return errors.New(d.Workspace.Redact(fmt.Sprintf("notify %s: %v", n.Notify, err)))
		case !o.Success():
			msg := fmt.Sprintf("notify %s: command %s", n.Notify, o.Describe())
			if line := skew.LastLine(append(o.Stdout, o.Stderr...)); line != "" {
				msg += ": " + line
			}
			return errors.New(d.Workspace.Redact(msg))
		}
		return nil
	case ChannelWebhook:
		if blk.Webhook == "" {
			return fmt.Errorf("notify %s: %w: it sets no webhook any more", n.Notify, errGone)
		}
		if err := post(ctx, blk.Webhook, payloadKey(n), body, blk.Timeout); err != nil {
			return errors.New(d.Workspace.Redact(fmt.Sprintf("notify %s: %v", n.Notify, err)))
		}
		return nil
	}
	return fmt.Errorf("notify %s: %w: unknown channel %q", n.Notify, errGone, n.Channel)
}

// payloadKey is the idempotency key the payload carries: the same for
// the command and the webhook of one block.
func payloadKey(n store.Notification) string {
	if i := strings.LastIndex(n.Key, "/"); i >= 0 {
		return n.Key[:i]
	}
	return n.Key
}

// webhookClient follows no redirect: a 301 or 302 would turn the POST
// into a GET without its body, and its 2xx would be taken for a delivery.
var webhookClient = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// post POSTs body to a webhook with its idempotency key in the
// Idempotency-Key header; errors name the webhook by scheme and host only.
func post(ctx context.Context, url, key string, body []byte, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("webhook %s: cannot build the request", dsl.RedactURL(url))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := webhookClient.Do(req)
	if err != nil {
		// The cause only ("connection refused", "context deadline
		// exceeded"): a *url.Error's text holds the whole URL.
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("webhook %s: %s", dsl.RedactURL(url), strings.ReplaceAll(err.Error(), url, dsl.RedactedMarker))
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("webhook %s answered %s", dsl.RedactURL(url), resp.Status)
	}
	return nil
}
