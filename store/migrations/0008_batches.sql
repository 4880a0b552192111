-- rewind state, version 8: backfill batches.
--
-- A batched backfill runs one run for several consecutive intervals of a
-- pipeline: the batch's first run (its leader) holds the batch's whole
-- data interval, and each other interval keeps its own run, covered by the
-- leader: batch_of is the leader's id (0 for any other run). A covered run
-- never runs; it ends when its leader ends, as its leader did, in the
-- same transaction. So runs, watermarks, reprocessing and later backfills
-- read one run per interval as before.
ALTER TABLE runs ADD COLUMN batch_of {{int}} NOT NULL DEFAULT 0;
CREATE INDEX runs_batch_of ON runs (batch_of) WHERE batch_of <> 0;
