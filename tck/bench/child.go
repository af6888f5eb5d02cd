package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
)

// The parent hands a child its job in this environment variable and reads
// its result from the stdout line starting with resultPrefix.
const (
	childEnv     = "SLUICE_BENCH_CHILD"
	resultPrefix = "BENCH-RESULT "
)

type childJob struct {
	Cfg Config
	Env Env
}

// spawn runs contender suite/name in a fresh process of this binary.
func spawn(ctx context.Context, suite, name string, cfg Config, env Env) (Result, error) {
	exe, err := os.Executable()
	if err != nil {
		return Result{}, fmt.Errorf("cannot re-execute the bench binary: %w", err)
	}
	job, err := json.Marshal(childJob{Cfg: cfg, Env: env})
	if err != nil {
		return Result{}, err
	}
	cmd := exec.CommandContext(ctx, exe, "-child", suite+"/"+name)
	cmd.Env = append(os.Environ(), childEnv+"="+string(job))
	cmd.Stderr = os.Stderr
	setDeathSignal(cmd)
	var out bytes.Buffer
	cmd.Stdout = &out
	runErr := cmd.Run()
	var res Result
	found := false
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, resultPrefix); ok {
			if err := json.Unmarshal([]byte(rest), &res); err != nil {
				return Result{}, fmt.Errorf("%s: unreadable result: %w", name, err)
			}
			found = true
			continue
		}
		fmt.Println(line)
	}
	if runErr != nil {
		return Result{}, fmt.Errorf("contender %s failed (its error is printed above): %w", name, runErr)
	}
	if !found {
		return Result{}, fmt.Errorf("contender %s printed no result", name)
	}
	return res, nil
}

// runChild runs one contender in this process and prints its result.
func runChild(which string) int {
	suiteName, name, _ := strings.Cut(which, "/")
	s, ok := suites[suiteName]
	if !ok {
		fmt.Fprintf(os.Stderr, "bench child: unknown suite %q\n", suiteName)
		return 2
	}
	c, ok := s.contender(name)
	if !ok {
		fmt.Fprintf(os.Stderr, "bench child: suite %s has no contender %q\n", suiteName, name)
		return 2
	}
	var job childJob
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &job); err != nil {
		fmt.Fprintf(os.Stderr, "bench child: %s not set or unreadable (the child is started by the bench itself): %v\n", childEnv, err)
		return 2
	}
	brokerPIDs = parsePIDs(job.Env[brokerPIDEnv])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, job.Cfg.Timeout)
	defer cancel()
	if dir := job.Cfg.ProfileDir; dir != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%s-%d.pprof", suiteName, name, os.Getpid())))
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench child: cpu profile:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "bench child: cpu profile:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	if job.Cfg.MemProfileDir != "" {
		runtime.MemProfileRate = memProfileRate // before the run allocates: a finer sample than the default 512 KiB
	}
	if dir := job.Cfg.TraceDir; dir != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%s-%d.trace", suiteName, name, os.Getpid())))
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench child: trace:", err)
			return 1
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			fmt.Fprintln(os.Stderr, "bench child: trace:", err)
			return 1
		}
		defer trace.Stop()
	}
	res, err := c.Run(ctx, job.Env, job.Cfg)
	if dir := job.Cfg.MemProfileDir; dir != "" && err == nil {
		if perr := writeHeapProfile(filepath.Join(dir, fmt.Sprintf("%s-%s-%d.alloc.pprof", suiteName, name, os.Getpid()))); perr != nil {
			fmt.Fprintln(os.Stderr, "bench child: memory profile:", perr)
			return 1
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %s/%s: %v\n", suiteName, name, err)
		return 1
	}
	res.Name = name
	b, err := json.Marshal(res)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		return 1
	}
	fmt.Println(resultPrefix + string(b))
	return 0
}

// writeHeapProfile writes the allocation profile of the whole child run
// (go tool pprof -sample_index=alloc_objects reads where allocations are
// made; the contender's untimed preparation is in it too).
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// memProfileRate is runtime.MemProfileRate in a child run with -memprofile.
const memProfileRate = 4096
