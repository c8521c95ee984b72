package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServerDiesWithItsProcess: a test binary that dies without stopping its
// server (a panic, a timeout) takes the server with it. The test runs itself
// again as a child that starts a server, prints its PID and exits at once.
func TestServerDiesWithItsProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux ties a child's life to its parent")
	}
	if os.Getenv("TESTENV_ORPHAN") == "1" {
		s, err := Start()
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(2)
		}
		fmt.Println("pid", s.cmd.Process.Pid, "dir", s.Dir)
		os.Exit(3) // no Stop, as after a panic
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestServerDiesWithItsProcess$")
	cmd.Env = append(os.Environ(), "TESTENV_ORPHAN=1")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("child: %v, output %q", err, out)
	}
	var pid int
	var dir string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "pid" {
			pid, _ = strconv.Atoi(f[1])
			dir = f[3]
		}
	}
	if pid == 0 {
		t.Fatalf("child printed no server pid: %q", out)
	}
	t.Cleanup(func() { os.RemoveAll(strings.TrimSuffix(dir, "/root")) })
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("server %d still runs 10 s after the process that started it exited", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether pid runs (a zombie, which nobody may reap in a
// container, has ended).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses, which may hold spaces.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
