//go:build !linux

package testenv

import "os/exec"

// startOwned starts cmd; only Linux can tie the child's life to this process.
func startOwned(cmd *exec.Cmd, done <-chan struct{}) error { return cmd.Start() }
