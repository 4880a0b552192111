package executor

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// SignalName is the short name of a signal: "killed", "terminated", ...
func SignalName(s syscall.Signal) string { return s.String() }

// ProcessStart returns the start time of process pid in clock ticks since
// boot (field 22 of /proc/PID/stat): with the pid, it names one process
// even after the pid is reused.
func ProcessStart(pid int) (uint64, error) {
	s, err := readProc(pid, "stat")
	if err != nil {
		return 0, err
	}
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state); field 22 is fields[19].
	if len(fields) < 20 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	if fields[0] == "Z" {
		return 0, fmt.Errorf("process %d is a zombie", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// readProc reads /proc/PID/NAME (see readFile).
func readProc(pid int, name string) (string, error) {
	return readFile("/proc/" + strconv.Itoa(pid) + "/" + name)
}

// readFile reads a file of /proc or of a cgroup with plain system calls
// (open, read, close), cheaper than os.ReadFile for these small files.
func readFile(path string) (string, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return "", &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return string(buf), nil
		}
		buf = buf[:len(buf)+n]
	}
}

// Alive reports whether pid is still the wrapper of the attempt logging to
// logPath (a reused pid runs something else).
func Alive(pid int, logPath string) bool {
	if pid <= 0 {
		return false
	}
	if _, err := ProcessStart(pid); err != nil {
		return false // gone, or a zombie
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	return isWrapperOf(b, logPath)
}

func isWrapperOf(cmdline []byte, logPath string) bool {
	s := string(cmdline)
	for _, script := range [...]string{argvWrapper, shellWrapper, cgroupArgvWrapper, cgroupShellWrapper} {
		if strings.HasPrefix(s, "/bin/sh\x00-c\x00"+script+"\x00/bin/sh\x00"+logPath+"\x00") {
			return true
		}
	}
	return strings.HasPrefix(s, "/bin/sh\x00-c\x00"+legacyWrapper+"\x00"+logPath+"\x00")
}

// FindWrapper returns the pid of the live wrapper of the attempt logging to
// logPath, or 0. It scans /proc: recovery uses it for an attempt whose pid
// was not recorded because rewind died right after starting it.
func FindWrapper(logPath string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if Alive(pid, logPath) {
			return pid
		}
	}
	return 0
}

// statusTail is how much of the end of a log is searched for its status.
const statusTail = 64 << 10

// ReadStatus reads the exit status the wrapper appended to an attempt's log,
// for attempts started without a nonce (by older rewinds); ok is false when
// there is none (the wrapper was killed, or still runs). A task can forge
// this line: use ReadStatusNonce for attempts with a nonce.
func ReadStatus(logPath string) (code int, ok bool) {
	return readStatus(logPath, "")
}

// ReadStatusNonce reads the exit status the wrapper of the attempt with the
// given nonce appended to its log: the last status line carrying that nonce
// in the log's last 64 KiB. A line without it (printed by the task, or by
// another attempt) is ignored. nonce "" (an attempt of an older rewind)
// reads as ReadStatus.
func ReadStatusNonce(logPath, nonce string) (code int, ok bool) {
	if nonce != "" && !validNonce(nonce) {
		return 0, false
	}
	return readStatus(logPath, nonce)
}

func readStatus(logPath, nonce string) (code int, ok bool) {
	f, err := os.Open(logPath)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, false
	}
	off := max(0, st.Size()-statusTail)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil {
		return 0, false
	}
	marker := "\n" + statusMarker
	if nonce != "" {
		marker += nonce + " "
	}
	i := strings.LastIndex(string(buf), marker)
	if i < 0 {
		return 0, false
	}
	digits, _, found := strings.Cut(string(buf[i+len(marker):]), "\n")
	if !found || digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return 0, false
	}
	code, err = strconv.Atoi(digits)
	return code, err == nil
}

// Adopt waits for an attempt started by an earlier rewind that died: it polls
// until the wrapper is gone, then reads the status it wrote (without a
// nonce). ok is false when no status was written (the attempt is lost).
// AdoptWait supersedes it.
func Adopt(ctx context.Context, pid int, logPath string) (code int, ok bool, err error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for Alive(pid, logPath) {
		select {
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-tick.C:
		}
	}
	code, ok = ReadStatus(logPath)
	return code, ok, nil
}
