package symbolize

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// pfExiting is PF_EXITING (include/linux/sched.h): the task has begun to
// exit. /proc/PID/stat shows a task's flags as its ninth field.
const pfExiting = 0x4

// processExiting reports whether every thread of process pid has begun to
// exit, or the process is gone. Its address space is then being torn down
// (or soon will be), and a read of its maps may show any prefix of them:
// the kernel takes the address-space lock afresh for each read(2) of the
// file (at most a page of text, some forty lines; os.ReadFile asks for
// 512 bytes first), so a read that straddles the teardown ends early.
// Called after a maps read, it says whether that read can be trusted to
// list every mapping.
//
// A process whose main thread alone has exited (pthread_exit from main)
// keeps its address space while other threads run: it is not exiting.
func processExiting(procRoot string, pid int) bool {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	if !taskExiting(filepath.Join(dir, "stat")) {
		return false
	}
	tasks, err := os.ReadDir(filepath.Join(dir, "task"))
	if err != nil {
		return true
	}
	for _, t := range tasks {
		if !taskExiting(filepath.Join(dir, "task", t.Name(), "stat")) {
			return false
		}
	}
	return true
}

// taskExiting reports whether the task whose stat file is at path has
// begun to exit: PF_EXITING set, a zombie or dead, or its file gone or
// unreadable.
func taskExiting(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return true
	}
	// "pid (comm) state ppid pgrp session tty_nr tpgid flags ...": the
	// command may hold spaces and parentheses, so fields count from the
	// last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return true
	}
	fields := bytes.Fields(data[i+1:])
	if len(fields) < 7 {
		return true
	}
	if s := fields[0]; len(s) != 1 || s[0] == 'Z' || s[0] == 'X' || s[0] == 'x' {
		return true
	}
	flags, err := strconv.ParseUint(string(fields[6]), 10, 64)
	return err != nil || flags&pfExiting != 0
}

// Exiting reports whether every thread of process pid has begun to exit, or
// it is gone: what /proc shows of it now (its maps, its cgroups) may be
// torn down already, and a read made before this call cannot be trusted.
func Exiting(pid int) bool { return processExiting("/proc", pid) }
