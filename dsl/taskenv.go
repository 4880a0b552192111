package dsl

import (
	"strconv"
	"time"
)

// TaskEnv is the REWIND_* environment of an attempt (contract): the same
// values that templates see as run.* and pool.*, for the process of task at
// try number try. The REWIND_SECRET_<name> variables that carry sensitive
// values (and that a string command refers to instead of holding the
// values in argv) come with the rendered command's Env.
func TaskEnv(rv RunVars, pv PoolVars, task string, try int) []string {
	mem, cpus := "", ""
	if pv.Memory > 0 {
		mem = strconv.FormatInt(pv.Memory, 10)
	}
	if pv.CPUs > 0 {
		cpus = strconv.Itoa(pv.CPUs)
	}
	return []string{
		"REWIND_PIPELINE=" + rv.Pipeline,
		"REWIND_TASK=" + task,
		"REWIND_RUN_ID=" + rv.ID,
		"REWIND_DS=" + rv.LogicalDate.Format("2006-01-02"),
		"REWIND_DS_NODASH=" + rv.LogicalDate.Format("20060102"),
		"REWIND_LOGICAL_DATE=" + rv.LogicalDate.Format(time.RFC3339),
		"REWIND_DATA_INTERVAL_START=" + rv.DataIntervalStart.Format(time.RFC3339),
		"REWIND_DATA_INTERVAL_END=" + rv.DataIntervalEnd.Format(time.RFC3339),
		"REWIND_RUN_KIND=" + rv.Kind,
		"REWIND_TRY_NUMBER=" + strconv.Itoa(try),
		"REWIND_POOL=" + pv.Name,
		"REWIND_POOL_MEMORY=" + mem,
		"REWIND_POOL_CPUS=" + cpus,
		"REWIND_RUN_DIR=" + rv.Dir,
	}
}
