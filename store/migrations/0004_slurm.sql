-- rewind state, version 4: attempts that run as Slurm jobs.
--
-- job_id: the Slurm job id of an attempt in a pool with executor = "slurm"
-- (StartAttempt records it in place of a pid); '' for local attempts.
-- Recovery adopts such an attempt by its job id: it is never submitted
-- again while Slurm still has the job. Written for every backend (the
-- double-brace tokens of store/migrate.go; none is needed here).
ALTER TABLE attempts ADD COLUMN job_id TEXT NOT NULL DEFAULT '';
