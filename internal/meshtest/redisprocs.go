package meshtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a redis-server process, a cluster or a
// sentinel may take to come up: a few seconds on a loaded machine.
const startTimeout = 30 * time.Second

// needBinaries skips the test, with one line, when a Redis binary is
// missing; in CI (CI=true) it fails instead, since CI must run these tests.
func needBinaries(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed, and CI must run this test (Debian: apt-get install redis-server)", n)
			}
			t.Skipf("%s is not installed: skipping (Debian: apt-get install redis-server)", n)
		}
	}
}

// freePort is a loopback port nobody listens on now. With bus set, port
// plus 10000 (the Redis Cluster bus) is free too.
func freePort(t testing.TB, bus bool) int {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("find a free port: %v", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if !bus {
			return port
		}
		if port+10000 > 65535 {
			continue
		}
		if bl, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000)); err == nil {
			_ = bl.Close()
			return port
		}
	}
	t.Fatal("no free port pair for a Redis Cluster node")
	return 0
}

// redisServer starts redis-server with args in dir, logging to a file
// there, and stops it when the test ends. It waits until the server
// answers PING (with password, when it has one).
func redisServer(t testing.TB, dir, name string, port int, password string, args ...string) {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("redis-server", args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = logFile.Close()
	})
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), Password: password})
	defer rdb.Close()
	waitFor(t, name+" to answer PING", logPath, func(ctx context.Context) error {
		select {
		case <-exited:
			return fmt.Errorf("%s exited", name)
		default:
		}
		return rdb.Ping(ctx).Err()
	})
}

// waitFor polls ready until it succeeds or startTimeout passes, then fails
// the test with the last error and the log at logPath.
func waitFor(t testing.TB, what, logPath string, ready func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := ready(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || strings.HasSuffix(err.Error(), " exited") {
			log, _ := os.ReadFile(logPath)
			t.Fatalf("waiting for %s: %v\n%s", what, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// RedisCluster starts a Redis Cluster of three masters (no replicas) on
// loopback, from redis-server processes made for the test and joined with
// `redis-cli --cluster create`, and returns its URL:
// redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3. The processes
// stop when the test ends. Without redis-server or redis-cli the test is
// skipped (failed in CI).
func RedisCluster(t testing.TB) string {
	t.Helper()
	needBinaries(t, "redis-server", "redis-cli")
	dir := t.TempDir()
	var nodes []string
	for i := range 3 {
		port := freePort(t, true)
		p := strconv.Itoa(port)
		redisServer(t, dir, "node"+strconv.Itoa(i), port, "",
			"--bind", "127.0.0.1", "--port", p, "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes-"+p+".conf", "--cluster-node-timeout", "5000",
			"--save", "", "--appendonly", "no", "--dir", dir)
		nodes = append(nodes, "127.0.0.1:"+p)
	}
	create := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, nodes...),
		"--cluster-replicas", "0", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create %v: %v\n%s", nodes, err, out)
	}
	// Every node must know every slot's owner before a client is given
	// the cluster, or its first commands meet CLUSTERDOWN.
	for _, n := range nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n})
		waitFor(t, "cluster state ok on "+n, filepath.Join(dir, "node0.log"), func(ctx context.Context) error {
			info, err := rdb.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
				state, _, _ := strings.Cut(info, "\n")
				return fmt.Errorf("cluster not formed yet (%s)", strings.TrimSpace(state))
			}
			return nil
		})
		_ = rdb.Close()
	}
	return "redis+cluster://" + strings.Join(nodes, ",")
}

// SentinelMaster is the master name RedisSentinel's sentinel watches.
const SentinelMaster = "ralphmaster"

// RedisSentinel starts a Redis master with password as its password ("" for
// none) and one sentinel watching it (requiring sentinelPassword, "" for
// none), and returns the URL the store reaches the master by:
// redis+sentinel://[:password@]127.0.0.1:SENTINEL/ralphmaster. The processes
// stop when the test ends. Without redis-server the test is skipped (failed
// in CI).
func RedisSentinel(t testing.TB, password, sentinelPassword string) string {
	t.Helper()
	needBinaries(t, "redis-server")
	dir := t.TempDir()
	master := freePort(t, false)
	args := []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(master), "--save", "", "--appendonly", "no", "--dir", dir}
	if password != "" {
		args = append(args, "--requirepass", password)
	}
	redisServer(t, dir, "master", master, password, args...)

	port := freePort(t, false)
	conf := []string{
		"bind 127.0.0.1",
		"port " + strconv.Itoa(port),
		"dir " + dir,
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1", SentinelMaster, master),
	}
	if password != "" {
		conf = append(conf, fmt.Sprintf("sentinel auth-pass %s %s", SentinelMaster, password))
	}
	if sentinelPassword != "" {
		conf = append(conf, "requirepass "+sentinelPassword)
	}
	// The sentinel rewrites its configuration file, so it is the test's.
	confPath := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(confPath, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	redisServer(t, dir, "sentinel", port, sentinelPassword, confPath, "--sentinel")
	s := redis.NewSentinelClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), Password: sentinelPassword})
	defer s.Close()
	waitFor(t, "the sentinel to name the master", filepath.Join(dir, "sentinel.log"), func(ctx context.Context) error {
		return s.GetMasterAddrByName(ctx, SentinelMaster).Err()
	})
	auth := ""
	if password != "" {
		auth = ":" + password + "@"
	}
	return fmt.Sprintf("redis+sentinel://%s127.0.0.1:%d/%s", auth, port, SentinelMaster)
}
