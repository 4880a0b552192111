package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Slurm runs an attempt as a Slurm batch job rather than as a local process:
// SubmitSlurm submits it with sbatch, SubmitSlurmWave submits several as
// job arrays (slurm_array.go), Wait follows it with squeue (slurm_poll.go)
// until it ends, and AdoptSlurm follows a job that an earlier rewind
// submitted, by its job id ("ARRAYID_i" for an element of an array). The job's script is the local wrapper's protocol in a batch script:
// it runs the command, then writes the same status line
// "[rewind] exit status <nonce> <rc>" to the attempt's log, which is the
// job's output (stdout and stderr). Slurm enforces the job's memory (--mem)
// and places it on its nodes; rewind enforces its own timeout (the job's
// --time is the timeout rounded up to minutes, as a backstop) and scancels
// the job on timeout or when its context is cancelled.
//
// Slurm's commands are found on PATH and read their configuration as they
// do by themselves (SLURM_CONF, else /etc/slurm/slurm.conf). No accounting
// database is needed: a job's outcome is read from `scontrol show job`, which
// knows a finished job for the cluster's MinJobAge; a job Slurm no longer
// knows at all is settled from the status line of its log.

// SlurmJob is where and as what an attempt runs on Slurm.
type SlurmJob struct {
	// Partition is the job's --partition ("" for the cluster's default).
	Partition string
	// Name is the job's --job-name (rewind:<pipeline>:<ds>:<task>:<try>).
	Name string
	// Poll is how often the job's state is read (default 1s).
	Poll time.Duration
	// Leave: a cancelled ctx stops Wait without cancelling the job (see
	// SlurmAdoptSpec.Leave).
	Leave bool
}

// SlurmHandle is a submitted job.
type SlurmHandle struct {
	// JobID is the job's id: "ARRAYID_i" for element i of a job array.
	JobID string
	spec  Spec
	job   SlurmJob
	start time.Time
	// array and element: the array's files and the element's index
	// (SubmitSlurmWave); nil for a job of its own.
	array   *arrayFiles
	element int
}

// slurmTimeout bounds every Slurm command rewind runs.
const slurmTimeout = time.Minute

const defaultSlurmPoll = time.Second

// SubmitSlurm submits the attempt of spec as a batch job. The attempt's log
// is created (truncated) first and the job appends its output to it. Spec's
// MemoryLimit is the job's --mem, CPUs its --cpus-per-task, Timeout its
// --time (rounded up to whole minutes), Env its environment, Dir its
// working directory. sbatch runs with Env and the Slurm client's
// configuration of rewind's environment (sbatchEnv), and exports exactly
// that to the job (--export=ALL), to which Slurm adds its SLURM_*
// variables: nothing else of rewind's environment reaches the job. The job is never
// requeued by Slurm: retries are rewind's.
func SubmitSlurm(ctx context.Context, spec Spec, job SlurmJob) (*SlurmHandle, error) {
	p, err := prepareSlurm(spec)
	if err != nil {
		return nil, err
	}
	spec, env, dir := p.spec, p.env, p.dir
	args := sbatchArgs(spec, job, dir)
	out, err := Run(ctx, Command{
		Argv: args, Env: sbatchEnv(os.Environ(), env), Stdin: strings.NewReader(slurmScript(spec)), Timeout: slurmTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("sbatch: %w", err)
	}
	if !out.Success() {
		return nil, fmt.Errorf("sbatch %s: %s", out.Describe(), firstLine(out.Stderr))
	}
	// --parsable: "jobid" or "jobid;cluster".
	id, _, _ := strings.Cut(strings.TrimSpace(string(out.Stdout)), ";")
	if !validJobID(id) {
		return nil, fmt.Errorf("sbatch: unexpected output %q", firstLine(out.Stdout))
	}
	AppendLine(spec.LogPath, fmt.Sprintf("rewind: submitted to Slurm as job %s (%s)", id, strings.Join(args[1:], " ")))
	return &SlurmHandle{JobID: id, spec: spec, job: job, start: time.Now()}, nil
}

// preparedSlurm is an attempt checked and made ready for sbatch: its
// environment, its absolute working directory, its log created.
type preparedSlurm struct {
	spec Spec
	env  []string
	dir  string
}

// prepareSlurm checks spec for Slurm, renders its environment and working
// directory, and creates (truncates) its log.
func prepareSlurm(spec Spec) (preparedSlurm, error) {
	if spec.Shell == "" && len(spec.Argv) == 3 && spec.Argv[0] == "/bin/sh" && spec.Argv[1] == "-c" && spec.Argv[2] != "" {
		spec.Shell, spec.Argv = spec.Argv[2], nil
	}
	switch {
	case spec.Shell != "" && len(spec.Argv) > 0:
		return preparedSlurm{}, errors.New("both a shell command and argv")
	case spec.Shell == "" && (len(spec.Argv) == 0 || spec.Argv[0] == ""):
		return preparedSlurm{}, errors.New("empty command")
	case !validNonce(spec.Nonce):
		return preparedSlurm{}, errors.New("nonce: not hex digits")
	case strings.ContainsAny(spec.LogPath, "%\\\n"):
		// Slurm reads % and \ in --output as a filename pattern.
		return preparedSlurm{}, fmt.Errorf("log path %q: a Slurm job's output path cannot contain %%, \\ or a newline", spec.LogPath)
	case !filepath.IsAbs(spec.LogPath):
		return preparedSlurm{}, fmt.Errorf("log path %q: a Slurm job's output path must be absolute", spec.LogPath)
	}
	if spec.Grace <= 0 {
		spec.Grace = 10 * time.Second
	}
	env, err := environ(spec)
	if err != nil {
		return preparedSlurm{}, err
	}
	dir := spec.Dir
	if dir == "" {
		if dir, err = os.Getwd(); err != nil {
			return preparedSlurm{}, err
		}
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return preparedSlurm{}, err
	}
	logfd, err := openLog(spec.LogPath)
	if err != nil {
		return preparedSlurm{}, err
	}
	syscall.Close(logfd)
	return preparedSlurm{spec: spec, env: env, dir: dir}, nil
}

// sbatchEnv is the environment of sbatch, which it exports to the job: the
// attempt's env, after the Slurm client's configuration taken from rewind's
// environment (from): SLURM_CONF and the other SLURM_* variables, and the
// SBATCH_* defaults of sbatch's options. sbatch needs them to reach its
// cluster; none is rewind's configuration, and the job sees Slurm's
// variables anyway.
func sbatchEnv(from, env []string) []string {
	var out []string
	for _, kv := range from {
		if strings.HasPrefix(kv, "SLURM_") || strings.HasPrefix(kv, "SBATCH_") {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// sbatchArgs is the sbatch command line of an attempt; its script comes on
// stdin.
func sbatchArgs(spec Spec, job SlurmJob, dir string) []string {
	// --export=ALL: the job's environment is sbatch's (sbatchEnv), whatever
	// an SBATCH_EXPORT says.
	args := []string{"sbatch", "--parsable", "--no-requeue", "--open-mode=append", "--export=ALL",
		"--job-name=" + job.Name, "--output=" + spec.LogPath, "--chdir=" + dir}
	if spec.Nonce != "" {
		// Tells this attempt's job from any other of the same name (FindSlurmJob).
		args = append(args, "--comment=rewind:"+spec.Nonce)
	}
	return append(args, slurmOptions(spec, job.Partition)...)
}

// slurmMemory is a --mem value: whole mebibytes, rounded up.
func slurmMemory(bytes int64) string {
	return strconv.FormatInt((bytes+(1<<20)-1)>>20, 10) + "M"
}

// slurmMinutes is a --time value: whole minutes, rounded up, at least 1.
func slurmMinutes(d time.Duration) int {
	return max(1, int((d+time.Minute-1)/time.Minute))
}

// slurmScript is the job's batch script: the command, then the status
// line with the attempt's nonce, as the local wrappers write it.
func slurmScript(spec Spec) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# rewind attempt\n")
	writeSlurmCommand(&b, spec)
	return b.String()
}

// writeSlurmCommand writes the attempt's command, then the status line with
// its nonce and the exit with its status.
func writeSlurmCommand(b *strings.Builder, spec Spec) {
	if spec.Shell != "" {
		// In a subshell, as the local shell wrapper runs it: the command's
		// exit, exec and traps leave the status line to the script.
		b.WriteString("(eval " + ShellQuote(spec.Shell) + ")")
	} else {
		for i, a := range spec.Argv {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(ShellQuote(a))
		}
	}
	nonce := spec.Nonce
	if nonce != "" {
		nonce += " "
	}
	b.WriteString("\nrc=$?\nprintf '\\n" + statusMarker + "%s%s\\n' '" + nonce + "' \"$rc\"\nexit \"$rc\"\n")
}

// ShellQuote quotes s as one word for /bin/sh.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func validJobID(id string) bool {
	if id == "" {
		return false
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// Wait follows the job until it ends: see AdoptSlurm, which it is with
// what SubmitSlurm knows.
func (h *SlurmHandle) Wait(ctx context.Context) Result {
	res := AdoptSlurm(ctx, SlurmAdoptSpec{
		JobID: h.JobID, LogPath: h.spec.LogPath, Nonce: h.spec.Nonce,
		Timeout: h.spec.Timeout, MemoryLimit: h.spec.MemoryLimit, Grace: h.spec.Grace,
		Poll: h.job.Poll, Leave: h.job.Leave, submitted: h.start,
	})
	if !res.Left {
		h.array.release(h.element)
	}
	return res
}

// SlurmAdoptSpec is a Slurm job to follow, as recorded with its attempt.
type SlurmAdoptSpec struct {
	JobID   string
	LogPath string
	Nonce   string
	// Timeout runs from the job's start (when Slurm started it running).
	Timeout time.Duration
	// MemoryLimit is the job's --mem: a job killed by SIGKILL (or exiting
	// 137) with a limit counts as out of memory, as Slurm's memory kill
	// ends it so.
	MemoryLimit int64
	Grace       time.Duration
	Poll        time.Duration
	// Leave: when ctx is cancelled, the job is left to Slurm (not
	// scancelled) and AdoptSlurm returns at once with Result.Left; the
	// next rewind adopts it by its job id. Its own timeout is then the
	// next rewind's to enforce (and Slurm's --time, as a backstop).
	Leave     bool
	submitted time.Time
}

// slurmJob is what `scontrol show job` says of a job.
type slurmJob struct {
	ID        string // the job's own id (squeue's JobID; "" from scontrol)
	State     string // COMPLETED, FAILED, RUNNING, ...
	ExitCode  int    // the batch script's exit status
	Signal    int    // the signal that killed it (0: none)
	StartTime time.Time
	Reason    string
}

// terminal reports whether the job has ended for good.
func (j slurmJob) terminal() bool {
	switch j.State {
	case "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED":
		return true
	}
	return false
}

func (j slurmJob) running() bool {
	switch j.State {
	case "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING":
		return true
	}
	return false
}

// errUnknownJob: Slurm does not know the job (never, or no longer).
var errUnknownJob = errors.New("slurm: unknown job")

// showJob reads a job's state with scontrol.
func showJob(ctx context.Context, id string) (slurmJob, error) {
	out, err := Run(ctx, Command{Argv: []string{"scontrol", "show", "job", "-o", id}, Timeout: slurmTimeout})
	if err != nil {
		return slurmJob{}, err
	}
	if !out.Success() {
		msg := firstLine(out.Stderr)
		if strings.Contains(msg, "Invalid job id") {
			return slurmJob{}, errUnknownJob
		}
		return slurmJob{}, fmt.Errorf("scontrol show job %s: %s: %s", id, out.Describe(), msg)
	}
	return parseJob(string(out.Stdout))
}

// parseJob reads the one-line `scontrol show job -o` of one job.
func parseJob(s string) (slurmJob, error) {
	var j slurmJob
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		switch k {
		case "JobId":
			j.ID = v
		case "JobState":
			j.State = v
		case "Reason":
			j.Reason = v
		case "ExitCode":
			rc, sig, _ := strings.Cut(v, ":")
			j.ExitCode, _ = strconv.Atoi(rc)
			j.Signal, _ = strconv.Atoi(sig)
		case "StartTime":
			if t, err := time.ParseInLocation("2006-01-02T15:04:05", v, time.Local); err == nil {
				j.StartTime = t
			}
		}
	}
	if j.State == "" {
		return j, fmt.Errorf("scontrol show job: no JobState in %q", firstLine([]byte(s)))
	}
	return j, nil
}

// AdoptSlurm follows Slurm job a.JobID until it ends and says how it ended,
// as Wait does for a local attempt. It never submits anything: a job that
// Slurm still has is waited for, whoever submitted it. While it waits, the
// rest of the timeout (counted from the job's start) is enforced and a
// cancelled ctx scancels the job (TimedOut, Interrupted); Slurm being
// unreachable for a while only delays it. The outcome:
//
//   - COMPLETED, FAILED: the script's exit status; killed by SIGKILL (or
//     exit 137) with a MemoryLimit: OOM (Slurm's memory kill, which ends a
//     job FAILED with signal 9 when it samples the usage);
//   - OUT_OF_MEMORY: OOM; TIMEOUT: TimedOut (Slurm's own --time);
//   - CANCELLED by someone else: Signal "cancelled";
//   - NODE_FAIL, PREEMPTED, BOOT_FAIL, DEADLINE: Signal the state's name;
//   - a job Slurm no longer knows: the status line of its log, else
//     NoStatus (lost).
func AdoptSlurm(ctx context.Context, a SlurmAdoptSpec) Result {
	if a.Grace <= 0 {
		a.Grace = 10 * time.Second
	}
	if a.Poll <= 0 {
		a.Poll = defaultSlurmPoll
	}
	bg := context.WithoutCancel(ctx)
	begin := a.submitted
	if begin.IsZero() {
		begin = time.Now()
	}
	var started time.Time // when the job started running
	var timeout <-chan time.Time
	tick := time.NewTicker(a.Poll)
	defer tick.Stop()
	var res Result
	stopped := false
	jobPoller.add(a.JobID)
	defer jobPoller.remove(a.JobID)
	seen := ""     // the state last read
	named := false // whether the log names the element's own job id
	for {
		// squeue, shared with every other job of this process, says the
		// job's state; scontrol reads the job when squeue cannot say.
		if sj, listed, ok := jobPoller.state(bg, a.JobID, a.Poll/2); !ok || !listed || sj.State != seen {
			j, err := sj, error(nil)
			if !ok || !listed {
				j, err = showJob(bg, a.JobID)
			}
			if err == nil {
				seen = j.State
				if !named && j.ID != "" && j.ID != a.JobID && (j.running() || j.terminal()) && strings.Contains(a.JobID, "_") {
					named = true
					AppendLine(a.LogPath, "rewind: Slurm job "+a.JobID+" runs as job "+j.ID)
				}
			}
			switch {
			case errors.Is(err, errUnknownJob):
				res = a.fromLog(res)
				res.Duration = time.Since(firstNonZero(started, begin))
				return res
			case err == nil && j.terminal():
				if !j.StartTime.IsZero() {
					started = j.StartTime
				}
				a.outcome(j, stopped, &res)
				res.Duration = time.Since(firstNonZero(started, begin))
				return res
			case err == nil && j.running() && started.IsZero():
				started = firstNonZero(j.StartTime, time.Now())
				if a.Timeout > 0 && !stopped {
					t := time.NewTimer(time.Until(started.Add(a.Timeout)))
					defer t.Stop()
					timeout = t.C
				}
			}
		}
		// A Slurm that cannot be reached (err != nil) is asked again.
		select {
		case <-tick.C:
		case <-timeout:
			timeout = nil
			if !stopped {
				stopped, res.TimedOut = true, true
				a.cancel(bg)
				AppendLine(a.LogPath, fmt.Sprintf("rewind: attempt timed out after %s; Slurm job %s cancelled", a.Timeout, a.JobID))
			}
		case <-ctx.Done():
			if (a.Leave || errors.Is(context.Cause(ctx), ErrLeave)) && !stopped {
				return Result{Left: true, Duration: time.Since(firstNonZero(started, begin))}
			}
			if !stopped {
				stopped, res.Interrupted = true, true
				a.cancel(bg)
			}
			ctx = bg // once
		}
	}
}

// cancel scancels the job (Slurm sends SIGTERM, then SIGKILL after its
// KillWait).
func (a SlurmAdoptSpec) cancel(ctx context.Context) {
	out, err := Run(ctx, Command{Argv: []string{"scancel", a.JobID}, Timeout: slurmTimeout})
	if err != nil || !out.Success() {
		msg := ""
		if err != nil {
			msg = err.Error()
		} else {
			msg = out.Describe() + ": " + firstLine(out.Stderr)
		}
		AppendLine(a.LogPath, "rewind: scancel "+a.JobID+": "+msg)
	}
}

// outcome maps the final state of the job to res (which already says
// whether rewind stopped it: TimedOut, Interrupted).
func (a SlurmAdoptSpec) outcome(j slurmJob, stopped bool, res *Result) {
	code := j.ExitCode
	exited := func() { res.ExitCode = &code }
	if stopped {
		// A job that ended by itself as rewind cancelled it keeps its own
		// outcome (as ownExit for local attempts).
		if j.State == "CANCELLED" || code == 128+int(syscall.SIGTERM) || code == 128+int(syscall.SIGKILL) || j.Signal != 0 {
			switch {
			case j.Signal != 0:
				res.Signal = SignalName(syscall.Signal(j.Signal))
			default:
				res.Signal = SignalName(syscall.SIGTERM)
			}
			return
		}
		res.TimedOut, res.Interrupted = false, false
	}
	switch j.State {
	case "COMPLETED":
		exited()
	case "FAILED":
		killed := j.Signal == int(syscall.SIGKILL) || j.Signal == 0 && code == 128+int(syscall.SIGKILL)
		switch {
		case killed && a.MemoryLimit > 0:
			a.oom(res)
		case j.Signal != 0:
			res.Signal = SignalName(syscall.Signal(j.Signal))
		default:
			exited()
		}
	case "OUT_OF_MEMORY":
		a.oom(res)
	case "TIMEOUT":
		res.TimedOut = true
		res.Signal = SignalName(syscall.SIGTERM)
		AppendLine(a.LogPath, "rewind: Slurm job "+a.JobID+" reached its time limit")
	case "CANCELLED":
		res.Signal = "cancelled"
		AppendLine(a.LogPath, "rewind: Slurm job "+a.JobID+" was cancelled outside rewind")
	default:
		res.Signal = strings.ToLower(j.State)
		AppendLine(a.LogPath, "rewind: Slurm job "+a.JobID+" ended "+j.State+" ("+j.Reason+")")
	}
}

// oomRE is slurmstepd's line for a job step over its memory.
var oomRE = regexp.MustCompile(`exceeded memory limit \((\d+) > (\d+)\)`)

func (a SlurmAdoptSpec) oom(res *Result) {
	res.OOM = true
	res.ExitCode = nil
	res.Signal = SignalName(syscall.SIGKILL)
	line := "rewind: attempt killed: Slurm job " + a.JobID + " ran out of memory"
	if b, err := readTail(a.LogPath); err == nil {
		if m := oomRE.FindAllStringSubmatch(b, -1); m != nil {
			used, _ := strconv.ParseInt(m[len(m)-1][1], 10, 64)
			res.PeakRSS = used
			line += fmt.Sprintf(" (it used %s)", formatBytes(used))
		}
	}
	if a.MemoryLimit > 0 {
		line += fmt.Sprintf(", over the pool's limit of %s", formatBytes(a.MemoryLimit))
	}
	AppendLine(a.LogPath, line)
}

// fromLog settles a job Slurm no longer knows from its log.
func (a SlurmAdoptSpec) fromLog(res Result) Result {
	if code, ok := ReadStatusNonce(a.LogPath, a.Nonce); ok {
		res.ExitCode = &code
		res.TimedOut, res.Interrupted = false, false
		return res
	}
	if !res.TimedOut && !res.Interrupted {
		res.NoStatus = true
		AppendLine(a.LogPath, "rewind: Slurm no longer knows job "+a.JobID+" and it wrote no exit status: lost")
	}
	return res
}

func readTail(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	off := max(0, st.Size()-statusTail)
	buf := make([]byte, st.Size()-off)
	_, err = f.ReadAt(buf, off)
	return string(buf), err
}

func firstNonZero(ts ...time.Time) time.Time {
	for _, t := range ts {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}

// SlurmJobAlive reports whether Slurm has job id and it has not ended
// (pending or running); an error when Slurm cannot be asked.
func SlurmJobAlive(ctx context.Context, id string) (bool, error) {
	j, err := showJob(ctx, id)
	if errors.Is(err, errUnknownJob) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !j.terminal(), nil
}

// FindSlurmJob returns the id of the job that SubmitSlurm (or
// SubmitSlurmWave: "ARRAYID_i") submitted for the attempt with this nonce, among the jobs named name (any name for ""), or
// "" if Slurm has none: for an attempt whose rewind died between sbatch and
// recording the job id.
func FindSlurmJob(ctx context.Context, name, nonce string) (string, error) {
	if nonce == "" {
		return "", nil
	}
	// --array: an element of a job array on a line of its own, as
	// "ARRAYID_i"; its comment is its array's, which names the file of
	// the elements' nonces.
	argv := []string{"squeue", "-h", "--states=all", "--array", "-o", "%i|%k"}
	if name != "" {
		argv = append(argv, "--name="+name)
	}
	out, err := Run(ctx, Command{Argv: argv, Timeout: slurmTimeout})
	if err != nil {
		return "", err
	}
	if !out.Success() {
		return "", fmt.Errorf("squeue: %s: %s", out.Describe(), firstLine(out.Stderr))
	}
	read := map[string][]string{}
	for _, line := range strings.Split(string(out.Stdout), "\n") {
		id, comment, ok := strings.Cut(strings.TrimSpace(line), "|")
		if !ok || !validJobID(id) {
			continue
		}
		if comment == "rewind:"+nonce {
			return id, nil
		}
		if _, i, element := splitElement(id); element && arrayNonce(comment, i, read) == nonce {
			return id, nil
		}
	}
	return "", nil
}
