package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/dsl"
	"github.com/rewind-dev/rewind/scheduler"
	"github.com/rewind-dev/rewind/store"
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

	show := &cobra.Command{
		Use:   "show TABLE",
		Short: "Snapshots, refs (branches and tags) and partitions with row counts",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := g.workspace("")
			if err != nil {
				return err
			}
			w, err := loadWorkspace(g, path, nil)
			if err != nil {
				return err
			}
			o, err := outputByTable(w, args[0])
			if err != nil {
				return err
			}
			// Reading creates nothing: neither a state nor a catalog.
			if err := requireCatalog(g, w, o); err != nil {
				return err
			}
			lakes := scheduler.NewLakes(w)
			defer lakes.Close()
			lk, err := lakes.Get(cmd.Context(), o.Catalog)
			if err != nil {
				return exitWith(exitFailed, "%v", err)
			}
			snaps, err := lk.Snapshots(cmd.Context(), o.Table)
			if err != nil {
				return exitWith(exitFailed, "%v", err)
			}
			refs, err := lk.Refs(cmd.Context(), o.Table)
			if err != nil {
				return exitWith(exitFailed, "%v", err)
			}
			stats, err := lk.PartitionStats(cmd.Context(), o.Table, "main", nil)
			if err != nil {
				return exitWith(exitFailed, "%v", err)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SNAPSHOT\tPARENT\tTIME\tOPERATION\tRUN")
			for _, s := range snaps {
				fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\n", s.ID, s.ParentID, s.Time.Format(time.RFC3339), s.Operation, s.Summary["rewind.run-id"])
			}
			tw.Flush()
			names := make([]string, 0, len(refs))
			for n := range refs {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				fmt.Fprintf(g.stdout, "ref %s -> %d\n", n, refs[n])
			}
			dates := make([]string, 0, len(stats))
			for d := range stats {
				dates = append(dates, d)
			}
			sort.Strings(dates)
			for _, d := range dates {
				fmt.Fprintf(g.stdout, "partition %s: %d rows\n", d, stats[d].Rows)
			}
			return nil
		},
	}

	var from, to string
	diff := &cobra.Command{
		Use:     "diff TABLE --from REF --to REF",
		Short:   "Per-partition row counts and sums of the numeric columns between two refs",
		Example: "  rewind lake diff analytics.fct_daily_revenue --from pre_backfill_ID --to main",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := g.workspace("")
			if err != nil {
				return err
			}
			w, err := loadWorkspace(g, path, nil)
			if err != nil {
				return err
			}
			o, err := outputByTable(w, args[0])
			if err != nil {
				return err
			}
			if err := requireCatalog(g, w, o); err != nil {
				return err
			}
			var cols []string
			for _, c := range o.Columns {
				if c.Type == "double" || c.Type == "long" || c.Type == "int" {
					cols = append(cols, c.Name)
				}
			}
			lakes := scheduler.NewLakes(w)
			defer lakes.Close()
			lk, err := lakes.Get(cmd.Context(), o.Catalog)
			if err != nil {
				return exitWith(exitFailed, "%v", err)
			}
			a, err := lk.PartitionStats(cmd.Context(), o.Table, from, cols)
			if err != nil {
				return exitWith(exitFailed, "%v", err)
			}
			b, err := lk.PartitionStats(cmd.Context(), o.Table, to, cols)
			if err != nil {
				return exitWith(exitFailed, "%v", err)
			}
			dates := map[string]bool{}
			for d := range a {
				dates[d] = true
			}
			for d := range b {
				dates[d] = true
			}
			sorted := make([]string, 0, len(dates))
			for d := range dates {
				sorted = append(sorted, d)
			}
			sort.Strings(sorted)
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PARTITION\tROWS\tCOLUMN\tFROM\tTO\tDIFF")
			for _, d := range sorted {
				if len(cols) == 0 {
					fmt.Fprintf(tw, "%s\t%d -> %d\t\t\t\t\n", d, a[d].Rows, b[d].Rows)
				}
				for _, c := range cols {
					fmt.Fprintf(tw, "%s\t%d -> %d\t%s\t%.2f\t%.2f\t%+.2f\n", d, a[d].Rows, b[d].Rows, c, a[d].Sums[c], b[d].Sums[c], b[d].Sums[c]-a[d].Sums[c])
				}
			}
			return tw.Flush()
		},
	}
	diff.Flags().StringVar(&from, "from", "", "the old ref (branch or tag)")
	diff.Flags().StringVar(&to, "to", "main", "the new ref")

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
			var override time.Duration
			if olderThan != "" {
				if override, err = dsl.ParseDuration(olderThan); err != nil {
					return exitWith(exitUsage, "--older-than %q: %v", olderThan, err)
				}
			}
			lakes := scheduler.NewLakes(w)
			defer lakes.Close()
			for _, p := range w.Pipelines {
				for _, o := range p.Outputs {
					keep := o.Retention
					if olderThan != "" {
						keep = override
					}
					lk, err := lakes.Get(cmd.Context(), o.Catalog)
					if err != nil {
						return exitWith(exitFailed, "%v", err)
					}
					res, err := lk.Expire(cmd.Context(), o.Table, time.Now().Add(-keep))
					if err != nil {
						return exitWith(exitFailed, "expire %s: %v", o.Table, err)
					}
					fmt.Fprintf(g.stdout, "%s: removed refs %v, %d snapshots\n", o.Table, res.RemovedRefs, len(res.RemovedSnapshots))
				}
			}
			return nil
		},
	}
	expire.Flags().StringVar(&olderThan, "older-than", "", "override every output's retention (e.g. 14d, 0s)")
	c.AddCommand(show, diff, expire)
	return c
}
