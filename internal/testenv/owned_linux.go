package testenv

import (
	"os/exec"
	"runtime"
	"syscall"
)

// startOwned starts cmd so that it is killed when this process ends, even
// by a panic or a test timeout, which skip every deferred Stop: a server
// left behind holds its port and directory until someone kills it.
// The kernel sends the signal when the thread that started the child exits,
// not the process, so the child is started from a thread locked for it,
// held until done is closed (Stop).
func startOwned(cmd *exec.Cmd, done <-chan struct{}) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		err := cmd.Start()
		errc <- err
		if err == nil {
			<-done
		}
	}()
	return <-errc
}
