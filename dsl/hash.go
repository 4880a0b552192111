package dsl

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	ctyjson "github.com/zclconf/go-cty/cty/json"
)

// The canonical form of a pipeline for its Hash: everything that changes
// what a run does, and nothing else (description, tags, comments, layout).
type hashPipeline struct {
	Schedule       string
	Timezone       string
	StartDate      string
	EndDate        string
	Catchup        bool
	MaxActiveRuns  int
	MaxActiveTasks int
	// ReprocessLookback is left out when unset: the hashes of pipelines
	// without it stay as they were.
	ReprocessLookback string `json:",omitempty"`
	Params            map[string]string
	Tasks             []hashTask
	Skew              *hashSkew
	Pools             map[string]hashPool
	Limits            map[string]hashLimit
	// Consumes is left out of the JSON when empty, so that the hash of a
	// pipeline that consumes nothing is the one it had before consumes existed.
	Consumes []string `json:",omitempty"`
	// Outputs, likewise left out when empty.
	Outputs []hashOutput `json:",omitempty"`
}

// hashOutput is what an output changes about a run: which files it commits
// where, and how.
type hashOutput struct {
	Catalog   string
	Table     string
	Columns   []OutputColumn
	Partition string
	From      string
}

// hashPool is a pool the pipeline uses: a task's, a skew block's, or one
// they escalate to.
type hashPool struct {
	Slots                int
	Memory               int64
	CPUs                 int
	EscalateTo           string
	ReservedForScheduled int
	IdleTimeout          time.Duration
	Launcher             string
	Setup                string
	Teardown             string
}

type hashLimit struct {
	Concurrency int
	Rate        int
	Per         time.Duration
}

type hashTask struct {
	Name          string
	DependsOn     []string
	Command       string
	Env           string
	Workdir       string
	Retries       int
	RetryDelay    time.Duration
	Backoff       bool
	Timeout       time.Duration
	Pool          string
	DependsOnPast bool
	Limits        []string
	Skew          *hashSkew
	// SkewHistory is left out when unset: the hashes of tasks without it
	// stay as they were.
	SkewHistory *bool `json:",omitempty"`
}

type hashSkew struct {
	HotDates  []string
	HotWhen   string
	Probe     string
	HotFactor float64
	Pool      string
	// HistoryOff and HistoryMin are left out at their defaults (history
	// on, a floor of DefaultHistoryMinDuration): the hashes of skew blocks
	// without them stay as they were.
	HistoryOff bool   `json:",omitempty"`
	HistoryMin string `json:",omitempty"`
}

func (l *loader) hashPipeline(p *Pipeline) string {
	h := hashPipeline{
		Schedule:       p.Schedule,
		Timezone:       p.Timezone.String(),
		StartDate:      p.StartDate.Format(time.RFC3339),
		Catchup:        p.Catchup,
		MaxActiveRuns:  p.MaxActiveRuns,
		MaxActiveTasks: p.MaxActiveTasks,
		Params:         p.Params,
		ReprocessLookback: func() string {
			if p.ReprocessLookback > 0 {
				return p.ReprocessLookback.String()
			}
			return ""
		}(),
		Pools:    map[string]hashPool{},
		Limits:   map[string]hashLimit{},
		Consumes: p.Consumes,
	}
	if !p.EndDate.IsZero() {
		h.EndDate = p.EndDate.Format(time.RFC3339)
	}
	usePool := func(name string) {
		for name != "" {
			pool := l.ws.Pools[name]
			if pool == nil {
				return
			}
			if _, seen := h.Pools[name]; seen {
				return
			}
			h.Pools[name] = hashPool{
				Slots:                pool.Slots,
				Memory:               pool.Memory,
				CPUs:                 pool.CPUs,
				EscalateTo:           pool.EscalateTo,
				ReservedForScheduled: pool.ReservedForScheduled,
				IdleTimeout:          pool.IdleTimeout,
				Launcher:             l.fingerprint(pool.launcher, pool.poolCtx),
				Setup:                l.fingerprint(pool.setup, pool.poolCtx),
				Teardown:             l.fingerprint(pool.teardown, pool.poolCtx),
			}
			name = pool.EscalateTo
		}
	}
	skew := func(s *Skew) *hashSkew {
		if s == nil {
			return nil
		}
		usePool(s.Pool)
		return &hashSkew{
			HotDates:   s.HotDates,
			HotWhen:    l.fingerprint(s.hotWhen, s.ctx),
			Probe:      l.fingerprint(s.probe, s.ctx),
			HotFactor:  s.HotFactor,
			Pool:       s.Pool,
			HistoryOff: !s.History,
			HistoryMin: func() string {
				if s.HistoryMinDuration == DefaultHistoryMinDuration {
					return ""
				}
				return s.HistoryMinDuration.String()
			}(),
		}
	}
	for _, t := range p.Tasks {
		h.Tasks = append(h.Tasks, hashTask{
			Name:          t.Name,
			DependsOn:     t.DependsOn,
			Command:       l.fingerprint(t.command, t.ctx),
			Env:           l.fingerprint(t.env, t.ctx),
			Workdir:       l.fingerprint(t.workdir, t.ctx),
			Retries:       t.Retries,
			RetryDelay:    t.RetryDelay,
			Backoff:       t.RetryExponentialBackoff,
			Timeout:       t.Timeout,
			Pool:          t.Pool,
			DependsOnPast: t.DependsOnPast,
			Limits:        t.Limits,
			Skew:          skew(t.Skew),
			SkewHistory:   t.SkewHistory,
		})
		usePool(t.Pool)
		for _, name := range t.Limits {
			if lim := l.ws.Limits[name]; lim != nil {
				h.Limits[name] = hashLimit{Concurrency: lim.Concurrency, Rate: lim.Rate, Per: lim.Per}
			}
		}
	}
	h.Skew = skew(p.Skew)
	for _, o := range p.Outputs {
		h.Outputs = append(h.Outputs, hashOutput{
			Catalog:   o.Catalog,
			Table:     o.Table,
			Columns:   o.Columns,
			Partition: o.Partition,
			From:      l.fingerprint(o.from, o.ctx),
		})
	}
	b, err := json.Marshal(h)
	if err != nil {
		// Every field is a plain value: this cannot fail.
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// fingerprint is an expression's tokens without comments and layout, plus
// the load-time values it refers to (var.*, local.*, each.*), so that it
// changes when the evaluated template would change for some run.
//
// A sensitive value (a sensitive variable, or a local derived from one)
// counts by its type only, never by its value nor a digest of it: rotating
// a secret is a change of configuration, not of the pipeline's code (as a
// Terraform user expects of a credential kept out of the code), so the
// hash stays the same; and the hash is stored in the state, where a digest
// of a short secret could be brute-forced. Making a variable sensitive, or
// no longer sensitive, does change the hash.
func (l *loader) fingerprint(expr hcl.Expression, ctx *hcl.EvalContext) string {
	if expr == nil {
		return ""
	}
	var b strings.Builder
	rng := expr.Range()
	src := sourceText(l.ws.Files, rng)
	tokens, _ := hclsyntax.LexExpression([]byte(src), rng.Filename, rng.Start)
	for _, tok := range tokens {
		switch tok.Type {
		case hclsyntax.TokenComment, hclsyntax.TokenNewline, hclsyntax.TokenEOF:
			continue
		}
		b.Write(tok.Bytes)
		b.WriteByte(' ')
	}
	for _, tr := range expr.Variables() {
		switch tr.RootName() {
		case "var", "local", "each":
		default:
			continue
		}
		v, diags := tr.TraverseAbs(ctx)
		if diags.HasErrors() || !v.IsWhollyKnown() {
			continue
		}
		if isSensitive(v) {
			b.WriteString("\x00")
			b.WriteString(tr.RootName())
			b.WriteString("(sensitive " + v.Type().FriendlyName() + ")")
			continue
		}
		js, err := ctyjson.Marshal(unmark(v), v.Type())
		if err != nil {
			continue
		}
		b.WriteString("\x00")
		b.WriteString(tr.RootName())
		b.Write(js)
	}
	return b.String()
}
