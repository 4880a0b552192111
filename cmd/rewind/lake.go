package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/lake"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
	"github.com/rewind-dev/rewind/web"
)

func init() { register(newLakeCmd) }

// outputByTable finds the output that writes table.
func outputByTable(w *dsl.Workspace, table string) (*dsl.Output, error) {
	var known []string
	for _, p := range w.Pipelines {
		for _, o := range p.Outputs {
			if o.Table == table {
				return o, nil
			}
			known = append(known, o.Table)
		}
	}
	sort.Strings(known)
	return nil, exitWith(exitUsage, "no output writes table %q (known: %v)", table, known)
}

// requireCatalog fails, for a read-only command, when the workspace has no
// state or the output's sql catalog does not exist yet: nothing was
// committed, and opening it would create it.
func requireCatalog(g *globals, w *dsl.Workspace, o *dsl.Output) error {
	exists, err := g.hasState()
	if err != nil {
		return err
	}
	if !exists {
		dsn, explicit, _ := g.stateDSN()
		path, _ := store.SQLitePath(dsn)
		return g.errNoState(explicit, path)
	}
	if c := w.Catalogs[o.Catalog]; c != nil && c.Type == dsl.CatalogSQL {
		if _, err := os.Stat(c.URI); errors.Is(err, fs.ErrNotExist) {
			return exitWith(exitUsage, "table %s has no version yet: its catalog %s (%s) does not exist (the first successful run commits it)", o.Table, c.Name, c.URI)
		}
	}
	return nil
}

func newLakeCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "lake",
		Short: "Inspect and maintain the versioned outputs (Apache Iceberg tables)",
	}
	c.AddCommand(newLakeShowCmd(g), newLakeDiffCmd(g), newLakeExpireCmd(g))
	return c
}

func newLakeShowCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "show TABLE",
		Short: "Snapshots, refs (branches and tags) and partitions with row counts",
		Long: `Show prints the table's snapshots (oldest first, with the run that
committed each), its refs (branches and tags) and the row count of each
partition of main.

--json prints one JSON object: table, snapshots (id, parent_id, null for
the first, time in UTC, operation, run_id), refs by name (name,
snapshot_id) and partitions of main by value (partition, rows).`,
		Example: "  rewind lake show analytics.fct_daily_revenue --json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			lk, o, done, err := openOutput(cmd, g, args[0])
			if err != nil {
				return err
			}
			defer done()
			snaps, err := lk.Snapshots(ctx, o.Table)
			if err != nil {
				return exitWith(exitFailed, "%v", err)
			}
			refs, err := lk.Refs(ctx, o.Table)
			if err != nil {
				return exitWith(exitFailed, "%v", err)
			}
			stats, err := lk.PartitionStats(ctx, o.Table, "main", nil)
			if err != nil {
				return exitWith(exitFailed, "%v", err)
			}
			if asJSON {
				return printJSON(g, web.LakeTable(o.Table, snaps, refs, stats))
			}
			printLakeShow(g.stdout, snaps, refs, stats)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func newLakeDiffCmd(g *globals) *cobra.Command {
	var from, to string
	diff := &cobra.Command{
		Use:     "diff TABLE --from REF --to REF",
		Short:   "Per-partition row counts and sums of the numeric columns between two refs",
		Example: "  rewind lake diff analytics.fct_daily_revenue --from pre_backfill_ID --to main",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lk, o, done, err := openOutput(cmd, g, args[0])
			if err != nil {
				return err
			}
			defer done()
			cols := numericColumns(o)
			a, err := lk.PartitionStats(cmd.Context(), o.Table, from, cols)
			if err != nil {
				return exitWith(exitFailed, "%v", err)
			}
			b, err := lk.PartitionStats(cmd.Context(), o.Table, to, cols)
			if err != nil {
				return exitWith(exitFailed, "%v", err)
			}
			return printLakeDiff(g.stdout, cols, a, b)
		},
	}
	diff.Flags().StringVar(&from, "from", "", "the old ref (branch or tag)")
	diff.Flags().StringVar(&to, "to", "main", "the new ref")
	return diff
}

func newLakeExpireCmd(g *globals) *cobra.Command {
	var olderThan string
	expire := &cobra.Command{
		Use:   "expire [--older-than 14d]",
		Short: "Drop tags and branches past each output's retention and expire old snapshots",
		Long: `Expire is the last step of a restatement, the old version's decommission: for every output, tags and branches
(other than main) created more than its retention ago (or --older-than) are
dropped, and the snapshots no ref needs any more are expired with their files.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := g.workspace("")
			if err != nil {
				return err
			}
			w, err := loadWorkspace(g, path, nil)
			if err != nil {
				return err
			}
			var override *time.Duration
			if olderThan != "" {
				d, err := dsl.ParseDuration(olderThan)
				if err != nil {
					return exitWith(exitUsage, "--older-than %q: %v", olderThan, err)
				}
				override = &d
			}
			return expireOutputs(cmd.Context(), g.stdout, w, override)
		},
	}
	expire.Flags().StringVar(&olderThan, "older-than", "", "override every output's retention (e.g. 14d, 0s)")
	return expire
}

// openOutput opens the lake of the output that writes table, for the
// commands that read it: reading creates nothing, neither a state nor a
// catalog. done closes it.
func openOutput(cmd *cobra.Command, g *globals, table string) (*lake.Lake, *dsl.Output, func(), error) {
	path, err := g.workspace("")
	if err != nil {
		return nil, nil, nil, err
	}
	w, err := loadWorkspace(g, path, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	o, err := outputByTable(w, table)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := requireCatalog(g, w, o); err != nil {
		return nil, nil, nil, err
	}
	lakes := scheduler.NewLakes(w)
	lk, err := lakes.Get(cmd.Context(), o.Catalog)
	if err != nil {
		lakes.Close()
		return nil, nil, nil, exitWith(exitFailed, "%v", err)
	}
	return lk, o, func() { lakes.Close() }, nil
}

// numericColumns are the columns of o that lake diff sums.
func numericColumns(o *dsl.Output) []string {
	var cols []string
	for _, c := range o.Columns {
		if c.Type == "double" || c.Type == "long" || c.Type == "int" {
			cols = append(cols, c.Name)
		}
	}
	return cols
}

// expireOutputs drops, for every output of w, the refs and snapshots past
// its retention (or override), and says what it removed.
func expireOutputs(ctx context.Context, out io.Writer, w *dsl.Workspace, override *time.Duration) error {
	lakes := scheduler.NewLakes(w)
	defer lakes.Close()
	for _, p := range w.Pipelines {
		for _, o := range p.Outputs {
			keep := o.Retention
			if override != nil {
				keep = *override
			}
			lk, err := lakes.Get(ctx, o.Catalog)
			if err != nil {
				return exitWith(exitFailed, "%v", err)
			}
			res, err := lk.Expire(ctx, o.Table, time.Now().Add(-keep))
			if err != nil {
				return exitWith(exitFailed, "expire %s: %v", o.Table, err)
			}
			fmt.Fprintf(out, "%s: removed refs %v, %d snapshots\n", o.Table, res.RemovedRefs, len(res.RemovedSnapshots))
		}
	}
	return nil
}

// printLakeShow prints a table's snapshots, its refs and the row count of
// each partition on main.
func printLakeShow(w io.Writer, snaps []lake.SnapshotInfo, refs map[string]int64, stats map[string]lake.PartitionStat) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SNAPSHOT\tPARENT\tTIME\tOPERATION\tRUN")
	for _, s := range snaps {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\n", s.ID, s.ParentID, s.Time.Format(time.RFC3339), s.Operation, s.Summary["rewind.run-id"])
	}
	tw.Flush()
	for _, n := range slices.Sorted(maps.Keys(refs)) {
		fmt.Fprintf(w, "ref %s -> %d\n", n, refs[n])
	}
	for _, d := range slices.Sorted(maps.Keys(stats)) {
		fmt.Fprintf(w, "partition %s: %d rows\n", d, stats[d].Rows)
	}
}

// printLakeDiff prints, for every partition of a or b, the row counts and
// the sums of cols before and after.
func printLakeDiff(w io.Writer, cols []string, a, b map[string]lake.PartitionStat) error {
	dates := map[string]bool{}
	for d := range a {
		dates[d] = true
	}
	for d := range b {
		dates[d] = true
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tROWS\tCOLUMN\tFROM\tTO\tDIFF")
	for _, d := range slices.Sorted(maps.Keys(dates)) {
		if len(cols) == 0 {
			fmt.Fprintf(tw, "%s\t%d -> %d\t\t\t\t\n", d, a[d].Rows, b[d].Rows)
		}
		for _, c := range cols {
			fmt.Fprintf(tw, "%s\t%d -> %d\t%s\t%.2f\t%.2f\t%+.2f\n", d, a[d].Rows, b[d].Rows, c, a[d].Sums[c], b[d].Sums[c], b[d].Sums[c]-a[d].Sums[c])
		}
	}
	return tw.Flush()
}
