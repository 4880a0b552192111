// Package rename is `rewind rename OLD NEW`: it carries the history of a
// pipeline renamed in the pipeline files over to its new name, so that the
// new name's catchup finds every finished run finished. The state moves in
// one transaction of package store (Store.RenamePipeline), under the
// execution lease, so that no rewind executes meanwhile; then the
// pipeline's log and run directories move on disk, the run directories
// first and the logs last. A rename stopped between the two (killed, the
// disk full) leaves the state under the new name and some files under the
// old one; the same command run again finds that from the state and the
// files and moves what is left.
//
// It decides no transition of a run and starts no process; it knows the
// backfills' plans only through package backfill (RenamePlan).
package rename
