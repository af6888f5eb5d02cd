package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// brokerPIDEnv is the Env key under which a suite's Setup names the
// broker's processes, comma-separated (their CPU time is read from /proc),
// when the broker is a process of its own.
const brokerPIDEnv = "broker-pid"

// brokerPIDs are the broker processes of the running contender (none: no
// broker process); runChild sets them from the job's Env.
var brokerPIDs []int

// parsePIDs reads brokerPIDEnv's value.
func parsePIDs(s string) []int {
	var pids []int
	for _, f := range strings.Split(s, ",") {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processCPU is this process's CPU time so far (user + system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// brokerCPU is the CPU time so far of brokerPIDs and their descendants (a
// server script's broker is its child), from /proc (procCPU); 0 when
// there is no broker process or no /proc.
func brokerCPU() time.Duration {
	var total time.Duration
	seen := map[int]bool{}
	var walk func(pid int)
	walk = func(pid int) {
		if seen[pid] || len(seen) > 256 {
			return
		}
		seen[pid] = true
		total += procCPU(pid)
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
		if err != nil {
			return
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				walk(c)
			}
		}
	}
	for _, pid := range brokerPIDs {
		walk(pid)
	}
	return total
}

// procCPU is pid's CPU time: the sum of its threads' run time in
// nanoseconds (/proc/<pid>/task/*/schedstat), or, where the kernel keeps
// no schedstat, utime+stime (/proc/<pid>/stat) in clock ticks of 10 ms,
// too coarse for a broker that spends under a microsecond on each of a
// run's 20,000 messages (it read 0). A thread that exits during a run
// takes its time with it: brokers keep theirs.
func procCPU(pid int) time.Duration {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, _ := os.ReadDir(dir)
	var ns int64
	read := false
	for _, t := range tasks {
		b, err := os.ReadFile(dir + t.Name() + "/schedstat")
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			ns, read = ns+n, true
		}
	}
	if read {
		return time.Duration(ns)
	}
	return time.Duration(procTicks(pid)) * (time.Second / 100)
}

// procTicks is utime+stime of pid from /proc/<pid>/stat.
func procTicks(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces: fields count from its ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64) // field 14
	k, _ := strconv.ParseInt(f[12], 10, 64) // field 15
	return u + k
}

// profileBroker starts a CPU profile of this process for round r of
// contender when cfg asks for profiles and the suite's broker runs in this
// process (kfake, the embedded MQTT broker): the broker's side of the run.
// The returned func stops it.
func profileBroker(cfg Config, env Env, suite, contender string, r int) (func(), error) {
	if cfg.ProfileDir == "" || !slices.Contains(parsePIDs(env[brokerPIDEnv]), os.Getpid()) {
		return func() {}, nil
	}
	f, err := os.Create(filepath.Join(cfg.ProfileDir, fmt.Sprintf("%s-%s-broker-%d.pprof", suite, contender, r)))
	if err != nil {
		return nil, fmt.Errorf("broker cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("broker cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
