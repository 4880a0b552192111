package notify

import (
	"encoding/json"
	"net/url"
	"time"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/store"
)

// Task is a task instance of the run that did not succeed, with its
// latest attempt.
type Task struct {
	Task  string `json:"task"`
	State string `json:"state,omitempty"` // failed, upstream_failed, running, ...
	// Outcome is the latest attempt's: "exit 3", "oom", "timeout",
	// "signal killed", "lost"; "" when it never ran.
	Outcome   string `json:"outcome,omitempty"`
	ExitCode  *int   `json:"exit_code,omitempty"`
	TryNumber int    `json:"try_number"`
	Pool      string `json:"pool,omitempty"`
	LogPath   string `json:"log_path,omitempty"`
}

// Payload is what a notify block receives for an event: the JSON body of
// its webhook's POST and its command's stdin.
type Payload struct {
	// IdempotencyKey is the same for every delivery of one event to one
	// block: a receiver that sees it twice (a rewind killed between the
	// send and its record) drops the second.
	IdempotencyKey string `json:"idempotency_key"`
	Event          string `json:"event"`
	Notify         string `json:"notify"`
	Pipeline       string `json:"pipeline,omitempty"`
	// The run: for deadline_missed, the run of the interval whose deadline
	// passed ("" when it had none then).
	RunID             string `json:"run_id,omitempty"`
	Kind              string `json:"kind,omitempty"`
	LogicalDate       string `json:"logical_date,omitempty"`
	DataIntervalStart string `json:"data_interval_start,omitempty"`
	DataIntervalEnd   string `json:"data_interval_end,omitempty"`
	// State is the run's state at the event: failed; for deadline_missed
	// also missing (no run), queued, running or success (late).
	State string `json:"state,omitempty"`
	// Deadline is, for deadline_missed, the instant the run had to succeed by.
	Deadline string `json:"deadline,omitempty"`
	Tasks    []Task `json:"tasks,omitempty"`
	// Error says why a run whose tasks all succeeded failed (its output's
	// commit or validation).
	Error string `json:"error,omitempty"`
	// Host, PreviousLeader and Generation describe a scheduler_takeover:
	// the scheduler that leads now (host:pid), the one it took over from,
	// and the leadership's generation.
	Host           string `json:"host,omitempty"`
	PreviousLeader string `json:"previous_leader,omitempty"`
	Generation     int64  `json:"generation,omitempty"`
	// Link is the run's page in rewind ui when the delivering rewind knows
	// its base URL (REWIND_UI_URL).
	Link      string `json:"link,omitempty"`
	CreatedAt string `json:"created_at"`
}

// EnvUIURL names the environment variable with rewind ui's base URL (as
// users reach it, e.g. https://rewind.example.com): payloads then link to
// the run's page.
const EnvUIURL = "REWIND_UI_URL"

// Event is one pipeline event before it is queued: Queue makes it one
// notification per notify block that gets it.
type Event struct {
	Name     string // dsl.EventRunFailed, dsl.EventDeadlineMissed
	Key      string // unique per event in the state; the block's name is appended
	Pipeline *dsl.Pipeline
	Run      store.Run // the run; for deadline_missed without a run, only its interval
	State    string
	Deadline time.Time
	Tasks    []Task
	Error    string
	At       time.Time
	// For a scheduler_takeover (Pipeline nil: every block that gets it).
	Host, PreviousLeader string
	Generation           int64
}

// Queue returns the notifications of ev: one for each notify block the
// pipeline names that gets the event, its payload redacted.
func Queue(ws *dsl.Workspace, ev Event) ([]store.Notification, error) {
	var out []store.Notification
	var targets []string
	if ev.Pipeline != nil {
		targets = ev.Pipeline.Notify
	} else {
		for _, n := range ws.Notifies {
			targets = append(targets, n.Name)
		}
	}
	for _, name := range targets {
		n := ws.Notify(name)
		if n == nil || !n.Wants(ev.Name) {
			continue
		}
		key := ev.Key + ":" + name
		p := Payload{
			IdempotencyKey: key, Event: ev.Name, Notify: name,
			State: ev.State, Tasks: ev.Tasks, Error: ws.Redact(ev.Error), CreatedAt: ev.At.UTC().Format(time.RFC3339Nano),
			Host: ev.Host, PreviousLeader: ev.PreviousLeader, Generation: ev.Generation,
		}
		pipeline := ""
		if ev.Pipeline != nil {
			pipeline = ev.Pipeline.Name
			p.Pipeline = pipeline
			p.LogicalDate = stamp(ev.Run.LogicalDate, ev.Pipeline)
			p.DataIntervalStart = stamp(ev.Run.DataIntervalStart, ev.Pipeline)
			p.DataIntervalEnd = stamp(ev.Run.DataIntervalEnd, ev.Pipeline)
		}
		if ev.Run.ID != 0 {
			p.RunID, p.Kind = store.RunID(ev.Run.Kind, ev.Run.LogicalDate), string(ev.Run.Kind)
		}
		if !ev.Deadline.IsZero() {
			p.Deadline = stamp(ev.Deadline, ev.Pipeline)
		}
		for i := range p.Tasks {
			p.Tasks[i].Outcome = ws.Redact(p.Tasks[i].Outcome)
		}
		body, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		for _, ch := range channels(n) {
			// Created (and due) on the state's clock, whatever clock the
			// event was seen with (--now, a host's clock ahead).
			out = append(out, store.Notification{Key: key + "/" + ch, Event: ev.Name, Notify: name, Channel: ch, Pipeline: pipeline, Payload: body})
		}
	}
	return out, nil
}

// The channels of a notify block: each is delivered, retried and recorded
// on its own, so that a webhook that is down does not make the command
// run again.
const (
	ChannelCommand = "command"
	ChannelWebhook = "webhook"
)

func channels(n *dsl.Notify) []string {
	var out []string
	if n.HasCommand() {
		out = append(out, ChannelCommand)
	}
	if n.Webhook != "" {
		out = append(out, ChannelWebhook)
	}
	return out
}

// WantedAnywhere reports whether any notify block of the workspace gets
// event (a scheduler's events, which belong to no pipeline).
func WantedAnywhere(ws *dsl.Workspace, event string) bool {
	for _, n := range ws.Notifies {
		if n.Wants(event) {
			return true
		}
	}
	return false
}

// Wanted reports whether any notify block the pipeline names gets event:
// when none does, the scheduler reads nothing more to build it.
func Wanted(ws *dsl.Workspace, p *dsl.Pipeline, event string) bool {
	for _, name := range p.Notify {
		if n := ws.Notify(name); n != nil && n.Wants(event) {
			return true
		}
	}
	return false
}

// stamp is t as RFC 3339 in the pipeline's zone; "" for the zero time.
func stamp(t time.Time, p *dsl.Pipeline) string {
	if t.IsZero() {
		return ""
	}
	return t.In(p.Timezone).Format(time.RFC3339)
}

// withLink is body with the run's link set when base is a URL and the
// payload names a run.
func withLink(body []byte, base string) []byte {
	if base == "" {
		return body
	}
	var p Payload
	if json.Unmarshal(body, &p) != nil || p.RunID == "" {
		return body
	}
	p.Link = base + "/pipelines/" + url.PathEscape(p.Pipeline) + "/runs/" + url.PathEscape(p.RunID)
	out, err := json.Marshal(p)
	if err != nil {
		return body
	}
	return out
}
