package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/store"
)

func init() { register(newRunsCmd) }

// JSON shapes of `runs --json` (contract).
type (
	runJSON struct {
		Pipeline          string     `json:"pipeline"`
		LogicalDate       string     `json:"logical_date"`
		DS                string     `json:"ds"`
		DataIntervalStart string     `json:"data_interval_start"`
		DataIntervalEnd   string     `json:"data_interval_end"`
		Kind              string     `json:"kind"`
		State             string     `json:"state"`
		Tasks             []taskJSON `json:"tasks"`
	}
	taskJSON struct {
		Task      string        `json:"task"`
		State     string        `json:"state"`
		Pool      string        `json:"pool"`
		TryNumber int           `json:"try_number"`
		Attempts  []attemptJSON `json:"attempts"`
	}
	attemptJSON struct {
		TryNumber int     `json:"try_number"`
		Pool      string  `json:"pool"`
		Reason    string  `json:"reason"`
		State     string  `json:"state"`
		ExitCode  *int    `json:"exit_code"`
		Signal    string  `json:"signal,omitempty"`
		StartedAt string  `json:"started_at"`
		EndedAt   *string `json:"ended_at"`
		PeakRSS   int64   `json:"peak_rss_bytes"`
		LogPath   string  `json:"log_path"`
	}
)

func newRunsCmd(g *globals) *cobra.Command {
	var (
		pipeline string
		asJSON   bool
	)
	c := &cobra.Command{
		Use:   "runs",
		Short: "List runs, their tasks and every attempt",
		Long: `Runs lists the runs in the state, oldest logical date first, with the state
of each task. --json prints one JSON array of runs with their tasks and every
attempt (try number, pool, exit code, start and end).`,
		Example: `  rewind runs
  rewind runs --pipeline daily_revenue --json | jq '.[] | select(.state == "failed")'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := openStore(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer st.Close()
			p := store.ListRunsParams{WithTasks: true, WithAttempts: asJSON}
			if pipeline != "" {
				p.Pipelines = []string{pipeline}
			}
			runs, err := st.ListRuns(cmd.Context(), p)
			if err != nil {
				return exitWith(exitFailed, "list runs: %v", err)
			}
			if asJSON {
				out := make([]runJSON, 0, len(runs))
				for _, r := range runs {
					out = append(out, toRunJSON(r))
				}
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				enc.SetEscapeHTML(false)
				return enc.Encode(out)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PIPELINE\tLOGICAL DATE\tKIND\tSTATE\tTASKS")
			for _, r := range runs {
				tasks := ""
				for i, t := range r.Tasks {
					if i > 0 {
						tasks += " "
					}
					tasks += fmt.Sprintf("%s=%s", t.Task, t.State)
					if t.TryNumber > 1 {
						tasks += fmt.Sprintf("(try %d)", t.TryNumber)
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Pipeline, r.LogicalDate.Format(time.RFC3339), r.Kind, r.State, tasks)
			}
			return tw.Flush()
		},
	}
	c.Flags().StringVar(&pipeline, "pipeline", "", "only this pipeline")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func toRunJSON(r store.Run) runJSON {
	out := runJSON{
		Pipeline: r.Pipeline, LogicalDate: r.LogicalDate.Format(time.RFC3339), DS: r.DS,
		DataIntervalStart: r.DataIntervalStart.Format(time.RFC3339), DataIntervalEnd: r.DataIntervalEnd.Format(time.RFC3339),
		Kind: string(r.Kind), State: string(r.State), Tasks: []taskJSON{},
	}
	for _, t := range r.Tasks {
		tj := taskJSON{Task: t.Task, State: string(t.State), Pool: t.Pool, TryNumber: t.TryNumber, Attempts: []attemptJSON{}}
		for _, a := range t.Attempts {
			aj := attemptJSON{TryNumber: a.TryNumber, Pool: a.Pool, Reason: a.Reason, State: string(a.State), ExitCode: a.ExitCode,
				Signal: a.Signal, StartedAt: a.StartedAt.UTC().Format(time.RFC3339Nano), PeakRSS: a.PeakRSS, LogPath: a.LogPath}
			if !a.EndedAt.IsZero() {
				e := a.EndedAt.UTC().Format(time.RFC3339Nano)
				aj.EndedAt = &e
			}
			tj.Attempts = append(tj.Attempts, aj)
		}
		out.Tasks = append(out.Tasks, tj)
	}
	return out
}
