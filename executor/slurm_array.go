package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A wave of attempts (those of one pool that a pass starts together) is
// submitted as Slurm job arrays rather than as one sbatch per attempt: one
// array per set of attempts that share their sbatch options (partition,
// --mem, --cpus-per-task, --time), split at the cluster's MaxArraySize.
// Before the submission, each element i gets files of its own in the
// array's directory:
//
//	i.sh    its script: the attempt's directory, environment and command,
//	        then the status line with its nonce, as slurmScript writes it
//	i.out   a symbolic link to the attempt's log: the array's --output is
//	        DIR/%a.out, so each element's output (slurmstepd's messages,
//	        such as its memory kill, included) goes to its attempt's log
//	nonces  the elements' nonces, line i for element i (FindSlurmJob)
//
// and the array's one batch script runs DIR/$SLURM_ARRAY_TASK_ID.sh.
// Element i is Slurm job "ARRAYID_i": it is followed, cancelled (scancel
// ARRAYID_i) and adopted by that id like any other job, and its attempt
// records it as its job id. An element's files are removed when it has been
// waited for to its end; the directory goes with its last element.

// SlurmWave is where and as what the attempts of a wave run on Slurm.
type SlurmWave struct {
	// Partition is the jobs' --partition ("" for the cluster's default).
	Partition string
	// Name is the arrays' --job-name.
	Name string
	// Dir is where the arrays' directories are made. Like the attempts'
	// logs, it must be a path the cluster's nodes see.
	Dir string
	// Poll and Leave: as in SlurmJob.
	Poll  time.Duration
	Leave bool
	// Names are the --job-name of each attempt, for an attempt submitted
	// alone (a wave of one, or one an array cannot take); nil or "": Name.
	Names []string
}

// SubmitSlurmWave submits the attempts of specs, as SubmitSlurm does each
// but together: as job arrays when two or more share their sbatch options,
// else one by one. handles[i] is specs[i]'s job, or errs[i] says why it was
// not submitted.
func SubmitSlurmWave(ctx context.Context, specs []Spec, w SlurmWave) (handles []*SlurmHandle, errs []error) {
	handles = make([]*SlurmHandle, len(specs))
	errs = make([]error, len(specs))
	alone := func(i int) {
		job := SlurmJob{Partition: w.Partition, Name: w.Name, Poll: w.Poll, Leave: w.Leave}
		if i < len(w.Names) && w.Names[i] != "" {
			job.Name = w.Names[i]
		}
		handles[i], errs[i] = SubmitSlurm(ctx, specs[i], job)
	}
	if len(specs) == 1 || w.Dir == "" {
		for i := range specs {
			alone(i)
		}
		return handles, errs
	}
	// Grouped by their sbatch options, in the order of the wave.
	type group struct {
		idx   []int
		ready []preparedSlurm
	}
	var order []string
	groups := map[string]*group{}
	var single []int
	for i, spec := range specs {
		p, err := prepareSlurm(spec)
		if err != nil {
			errs[i] = err
			continue
		}
		if !arrayable(p) {
			single = append(single, i)
			continue
		}
		key := strings.Join(slurmOptions(p.spec, w.Partition), " ")
		g := groups[key]
		if g == nil {
			g = &group{}
			groups[key] = g
			order = append(order, key)
		}
		g.idx = append(g.idx, i)
		g.ready = append(g.ready, p)
	}
	limit := maxArraySize(ctx)
	for _, key := range order {
		g := groups[key]
		if len(g.idx) == 1 || limit < 2 {
			single = append(single, g.idx...)
			continue
		}
		if len(g.idx) == 1 {
			single = append(single, g.idx[0])
			continue
		}
		for lo := 0; lo < len(g.idx); lo += limit {
			hi := min(lo+limit, len(g.idx))
			hs, err := submitArray(ctx, g.ready[lo:hi], w)
			for k, i := range g.idx[lo:hi] {
				if err != nil {
					errs[i] = err
					continue
				}
				handles[i] = hs[k]
			}
		}
	}
	for _, i := range single {
		alone(i)
	}
	return handles, errs
}

// arrayable: an attempt whose environment an element's script can set
// with export (every name a shell name).
func arrayable(p preparedSlurm) bool {
	for _, kv := range p.env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || !shellName(k) {
			return false
		}
	}
	return true
}

func shellName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// slurmOptions are the sbatch options that the elements of an array
// share: its resources and time limit.
func slurmOptions(spec Spec, partition string) []string {
	var args []string
	if partition != "" {
		args = append(args, "--partition="+partition)
	}
	if spec.MemoryLimit > 0 {
		args = append(args, "--mem="+slurmMemory(spec.MemoryLimit))
	}
	if spec.CPUs > 0 {
		args = append(args, "--cpus-per-task="+strconv.Itoa(spec.CPUs))
	}
	if spec.Timeout > 0 {
		args = append(args, "--time="+strconv.Itoa(slurmMinutes(spec.Timeout)))
	}
	return args
}

// arrayComment is the --comment of an array: it names its directory, whose
// nonces file tells which element is which attempt.
const arrayComment = "rewind:array:"

// submitArray submits ps (two or more, sharing their sbatch options) as one
// job array.
func submitArray(ctx context.Context, ps []preparedSlurm, w SlurmWave) ([]*SlurmHandle, error) {
	dir, err := filepath.Abs(filepath.Join(w.Dir, ps[0].spec.Nonce))
	if err != nil {
		return nil, err
	}
	if strings.ContainsAny(dir, "%\\\n") {
		return nil, fmt.Errorf("slurm array directory %q: a Slurm job's output path cannot contain %%, \\ or a newline", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("slurm array directory: %w", err)
	}
	var nonces strings.Builder
	for i, p := range ps {
		if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(i)+".sh"), []byte(elementScript(p)), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		if err := os.Symlink(p.spec.LogPath, filepath.Join(dir, strconv.Itoa(i)+".out")); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		nonces.WriteString(p.spec.Nonce + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "nonces"), []byte(nonces.String()), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// --export=ALL of the Slurm client's configuration only: each element's
	// script sets its attempt's environment, so that the job sees what a
	// job of its own would (sbatchEnv).
	args := append([]string{"sbatch", "--parsable", "--no-requeue", "--open-mode=append", "--export=ALL",
		"--job-name=" + w.Name, "--output=" + filepath.Join(dir, "%a.out"), "--chdir=" + dir,
		"--comment=" + arrayComment + dir, "--array=0-" + strconv.Itoa(len(ps)-1)},
		slurmOptions(ps[0].spec, w.Partition)...)
	script := "#!/bin/sh\n# rewind attempts: element $SLURM_ARRAY_TASK_ID of a job array runs its attempt's script\nexec /bin/sh " +
		ShellQuote(dir) + "/\"$SLURM_ARRAY_TASK_ID\".sh\n"
	out, err := Run(ctx, Command{Argv: args, Env: sbatchEnv(os.Environ(), nil), Stdin: strings.NewReader(script), Timeout: slurmTimeout})
	if err == nil && !out.Success() {
		err = fmt.Errorf("sbatch %s: %s", out.Describe(), firstLine(out.Stderr))
	} else if err != nil {
		err = fmt.Errorf("sbatch: %w", err)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(out.Stdout)), ";")
	if !validJobID(id) || strings.Contains(id, "_") {
		// Submitted, but its id is unreadable, and its attempts are about
		// to be recorded as launch errors and tried again: without their
		// scripts, the elements run nothing (an element that started
		// already has read its script, and its status line in its log is
		// not the retry's: the nonces differ).
		os.RemoveAll(dir)
		return nil, fmt.Errorf("sbatch: unexpected output %q", firstLine(out.Stdout))
	}
	now := time.Now()
	files := &arrayFiles{dir: dir}
	files.left.Store(int64(len(ps)))
	hs := make([]*SlurmHandle, len(ps))
	job := SlurmJob{Partition: w.Partition, Name: w.Name, Poll: w.Poll, Leave: w.Leave}
	for i, p := range ps {
		el := id + "_" + strconv.Itoa(i)
		AppendLine(p.spec.LogPath, fmt.Sprintf("rewind: submitted to Slurm as job %s, element %d of job array %s of %d (%s)", el, i, id, len(ps), strings.Join(args[1:], " ")))
		hs[i] = &SlurmHandle{JobID: el, spec: p.spec, job: job, start: now, array: files, element: i}
	}
	return hs, nil
}

// elementScript is element's script: into the attempt's directory, its
// environment exported, then its command and status line.
func elementScript(p preparedSlurm) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# rewind attempt (an element of a Slurm job array)\n")
	nonce := p.spec.Nonce
	if nonce != "" {
		nonce += " "
	}
	b.WriteString("cd " + ShellQuote(p.dir) + " || { rc=$?; printf '\\n" + statusMarker + "%s%s\\n' '" + nonce + "' \"$rc\"; exit \"$rc\"; }\n")
	for _, kv := range p.env {
		k, v, _ := strings.Cut(kv, "=")
		b.WriteString("export " + k + "=" + ShellQuote(v) + "\n")
	}
	writeSlurmCommand(&b, p.spec)
	return b.String()
}

// arrayFiles are the files of one array in dir; left counts its elements
// whose files are still there.
type arrayFiles struct {
	dir  string
	left atomic.Int64
}

// release removes the files of element i, and the array's directory with
// its last element.
func (a *arrayFiles) release(i int) {
	if a == nil {
		return
	}
	os.Remove(filepath.Join(a.dir, strconv.Itoa(i)+".sh"))
	os.Remove(filepath.Join(a.dir, strconv.Itoa(i)+".out"))
	if a.left.Add(-1) == 0 {
		os.RemoveAll(a.dir)
	}
}

// arrayNonce is the nonce of element i of the array whose --comment is
// comment, read from its nonces file ("" when it cannot be read); read
// keeps the files already read.
func arrayNonce(comment string, i int, read map[string][]string) string {
	dir, ok := strings.CutPrefix(comment, arrayComment)
	if !ok || i < 0 {
		return ""
	}
	lines, done := read[dir]
	if !done {
		if b, err := os.ReadFile(filepath.Join(dir, "nonces")); err == nil {
			lines = strings.Split(string(b), "\n")
		}
		read[dir] = lines
	}
	if i >= len(lines) {
		return ""
	}
	return lines[i]
}

// splitElement splits "ARRAYID_i" into its array's id and its index; ok is
// false for a job that is no element of an array.
func splitElement(id string) (array string, i int, ok bool) {
	array, idx, found := strings.Cut(id, "_")
	if !found {
		return id, 0, false
	}
	n, err := strconv.Atoi(idx)
	if err != nil {
		return id, 0, false
	}
	return array, n, true
}

var arraySize struct {
	sync.Mutex
	n int
}

// defaultMaxArraySize is Slurm's default MaxArraySize.
const defaultMaxArraySize = 1001

// maxArraySize is how many elements one array can have: the cluster's
// MaxArraySize (its indices run from 0 to MaxArraySize-1), read once from
// `scontrol show config`.
func maxArraySize(ctx context.Context) int {
	arraySize.Lock()
	defer arraySize.Unlock()
	if arraySize.n > 0 {
		return arraySize.n
	}
	n, err := readMaxArraySize(ctx)
	if err != nil {
		return defaultMaxArraySize
	}
	arraySize.n = n
	return n
}

func readMaxArraySize(ctx context.Context) (int, error) {
	out, err := Run(ctx, Command{Argv: []string{"scontrol", "show", "config"}, Timeout: slurmTimeout})
	if err != nil {
		return 0, err
	}
	if !out.Success() {
		return 0, errors.New(firstLine(out.Stderr))
	}
	for _, line := range strings.Split(string(out.Stdout), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(k) == "MaxArraySize" {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 1 {
				return 0, fmt.Errorf("MaxArraySize %q", v)
			}
			return n, nil
		}
	}
	return 0, errors.New("no MaxArraySize in scontrol show config")
}
