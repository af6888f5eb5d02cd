package mqtttest_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mqtt/mqtttest"
)

// TestMosquittoDiesWithTheTestProcess runs this test binary again as a
// child that starts a mosquitto and prints its PID, kills the child with
// SIGKILL (no Cleanup runs) and checks that the broker is gone too.
func TestMosquittoDiesWithTheTestProcess(t *testing.T) {
	if os.Getenv("MQTTTEST_ORPHAN_CHILD") == "1" {
		m, err := mqtttest.StartMosquitto(context.Background(), mqtttest.MosquittoOptions{})
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		fmt.Println("PID", m.PID())
		select {} // until killed
	}
	if _, err := mqtttest.MosquittoBinary(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestMosquittoDiesWithTheTestProcess$")
	child.Env = append(os.Environ(), "MQTTTEST_ORPHAN_CHILD=1")
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "PID ") || strings.HasPrefix(l, "ERR ") {
				lines <- l
				return
			}
		}
		close(lines)
	}()
	var pid int
	select {
	case l, ok := <-lines:
		if !ok || strings.HasPrefix(l, "ERR") {
			t.Fatalf("the child did not start mosquitto: %q", l)
		}
		pid, _ = strconv.Atoi(strings.TrimPrefix(l, "PID "))
	case <-time.After(60 * time.Second):
		t.Fatal("the child did not report a mosquitto PID within 60s")
	}
	if pid <= 0 {
		t.Fatal("no PID")
	}
	_ = child.Process.Signal(syscall.SIGKILL)
	_ = child.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH || isZombie(pid) {
			return
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL) // do not leave it behind
			t.Fatalf("mosquitto (PID %d) outlived the test process that started it by 20s", pid)
		}
		time.Sleep(20 * time.Millisecond) // polling a foreign process: no event to wait on
	}
}

// isZombie reports a process that exited and waits for its (gone) parent.
func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] == "Z"
}
