-- rewind state, version 3: backfills that can be paused and rolled back.
--
-- on_hold: `rewind backfill pause ID`: the backfill starts nothing new
-- (its running attempts finish) until `backfill unpause ID`.
-- rolled_back: `rewind backfill rollback ID` restored the window's
-- partitions of main from the pre_backfill_ID tag: the dates this backfill
-- ran hold, on main, what they held before it.
ALTER TABLE backfills ADD COLUMN on_hold {{int}} NOT NULL DEFAULT 0;
ALTER TABLE backfills ADD COLUMN rolled_back {{int}} NOT NULL DEFAULT 0;
