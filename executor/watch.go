package executor

import (
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// watch follows one process, a wrapper, to its end. A child of ours is
// reaped by its watch; an adopted wrapper (a child of whoever inherited it)
// is only seen to end. With pidfds (Linux 5.3) the watch is a goroutine
// parked in the runtime's poller on the process's pidfd, which becomes
// readable when the process ends: no thread blocks in wait4 per attempt.
type watch struct {
	pid   int
	child bool
	// ours: pid's process group is the attempt's (a child of ours, or an
	// adopted wrapper seen alive): only then is the group signalled.
	ours bool
	done chan struct{} // closed once the process has ended (a child: reaped)
	// status is a child's, once done, unless waitErr (the child was
	// reaped by another, as when SIGCHLD is ignored). No rusage: its
	// Maxrss would be rewind's own, inherited at fork.
	status  syscall.WaitStatus
	waitErr error
	pidfd   *os.File // nil without pidfds; closed once done
	// start and logPath identify an adopted wrapper without a pidfd.
	start   uint64
	logPath string
}

var pidfdWorks = sync.OnceValue(func() bool {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return false
	}
	syscall.Close(fd)
	return true
})

// pollable wraps a pidfd into a file of the runtime's poller.
func pollable(fd int) *os.File {
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil
	}
	return os.NewFile(uintptr(fd), "pidfd")
}

// watchChild watches a child started with pidfd (-1: none).
func watchChild(pid, pidfd int) *watch {
	w := &watch{pid: pid, child: true, ours: true, done: make(chan struct{})}
	if pidfd >= 0 {
		w.pidfd = pollable(pidfd)
	}
	go w.reap()
	return w
}

func (w *watch) reap() {
	defer w.finish()
	if w.pidfd != nil {
		if rc, err := w.pidfd.SyscallConn(); err == nil {
			calls, reaped, blocking := 0, false, false
			err = rc.Read(func(uintptr) bool {
				calls++
				for {
					pid, err := syscall.Wait4(w.pid, &w.status, syscall.WNOHANG, nil)
					switch {
					case err == syscall.EINTR:
						continue
					case err != nil:
						blocking = true // let the blocking wait report it
					case pid == w.pid:
						reaped = true
					case calls > 1:
						// Woken, yet not waitable: do not wait for
						// another edge of the pidfd.
						blocking = true
					}
					return reaped || blocking
				}
			})
			if err == nil && reaped {
				return
			}
		}
	}
	for {
		_, err := syscall.Wait4(w.pid, &w.status, 0, nil)
		if err != syscall.EINTR {
			w.waitErr = err
			return
		}
	}
}

// pgid is the attempt's process group, 0 when it is not known to be the
// attempt's (an adopted pid that was not, or no longer, its wrapper).
func (w *watch) pgid() int {
	if w.ours && w.pid > 1 {
		return w.pid
	}
	return 0
}

// waited reports whether the watch has the wait status of its process (a
// child, once done).
func (w *watch) waited() bool { return w.child && w.waitErr == nil }

// finish marks the watch done, then closes its pidfd.
func (w *watch) finish() {
	close(w.done)
	if w.pidfd != nil {
		w.pidfd.Close()
	}
}

// watchAdopted watches the wrapper pid, started by another process. A pid
// that is not the wrapper (its start time is not start; with start 0, it is
// not the wrapper of logPath) is taken as ended.
func watchAdopted(pid int, start uint64, logPath string) *watch {
	w := &watch{pid: pid, done: make(chan struct{}), start: start, logPath: logPath}
	if pid <= 1 {
		close(w.done)
		return w
	}
	if pidfdWorks() {
		fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
		if err == syscall.ESRCH {
			close(w.done)
			return w
		}
		if err == nil {
			w.pidfd = pollable(fd)
		}
	}
	// Checked once the pidfd (if any) pins the process: it cannot be
	// replaced under the pidfd.
	if !w.same() {
		w.finish()
		return w
	}
	w.ours = true
	go w.follow()
	return w
}

// same reports whether the adopted pid is still the wrapper, not a zombie.
func (w *watch) same() bool {
	if w.start != 0 {
		s, err := ProcessStart(w.pid)
		return err == nil && s == w.start
	}
	return Alive(w.pid, w.logPath)
}

// adoptPoll is how often an adopted wrapper is looked at without a pidfd.
const adoptPoll = 5 * time.Millisecond

func (w *watch) follow() {
	defer w.finish()
	if w.pidfd != nil {
		if rc, err := w.pidfd.SyscallConn(); err == nil {
			ended := false
			err = rc.Read(func(fd uintptr) bool {
				ended = pidfdReadable(int(fd))
				return ended
			})
			if err == nil && ended {
				return
			}
		}
	}
	for syscall.Kill(w.pid, 0) != syscall.ESRCH && w.same() {
		time.Sleep(adoptPoll)
	}
}

func pidfdReadable(fd int) bool {
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		if err == syscall.EINTR {
			continue
		}
		return err == nil && n > 0 && fds[0].Revents != 0
	}
}

func (w *watch) isDone() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// ended reports whether the process has ended, even if its watch has not yet
// seen it; if it has, ended returns once the watch is done.
func (w *watch) ended() bool {
	if w.isDone() {
		return true
	}
	exited := false
	if w.pidfd != nil {
		rc, err := w.pidfd.SyscallConn()
		if err == nil {
			err = rc.Control(func(fd uintptr) { exited = pidfdReadable(int(fd)) })
		}
		if err != nil {
			return w.isDone() // closed: done
		}
	} else if w.child {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, w.pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		exited = err == syscall.ECHILD || err == nil && info.Signo != 0
	} else {
		exited = syscall.Kill(w.pid, 0) == syscall.ESRCH || !w.same()
	}
	if exited {
		<-w.done
	}
	return exited
}
