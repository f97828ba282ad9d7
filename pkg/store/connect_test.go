package store_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/store"
)

func TestParseURL(t *testing.T) {
	cases := []struct {
		url   string
		kind  store.Kind
		addrs []string
		str   string
	}{
		{"redis://127.0.0.1:6379/2", store.Single, []string{"127.0.0.1:6379"}, "redis 127.0.0.1:6379"},
		{"rediss://:pw@redis.example:6380", store.Single, []string{"redis.example:6380"}, "redis redis.example:6380"},
		{"redis+cluster://10.0.0.1:7000", store.Cluster, []string{"10.0.0.1:7000"}, "cluster 10.0.0.1:7000"},
		{"redis+cluster://u:pw@10.0.0.1:7000,10.0.0.2:7000,10.0.0.3?dial_timeout=2s", store.Cluster,
			[]string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:6379"}, "cluster 10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:6379"},
		{"redis+cluster://10.0.0.1:7000/?addr=10.0.0.2:7000", store.Cluster, []string{"10.0.0.1:7000", "10.0.0.2:7000"}, ""},
		{"rediss+cluster://:pw@[::1]:7000,[::1]:7001", store.Cluster, []string{"[::1]:7000", "[::1]:7001"}, ""},
		{"10.0.0.1:7000, 10.0.0.2:7000", store.Cluster, []string{"10.0.0.1:7000", "10.0.0.2:7000"}, ""},
		{"redis+sentinel://s1,s2:26380/mymaster", store.Sentinel, []string{"s1:26379", "s2:26380"}, "sentinel s1:26379,s2:26380 (master mymaster)"},
		{"redis+sentinel://:pw@s1:26379/mymaster/3?dial_timeout=1s", store.Sentinel, []string{"s1:26379"}, ""},
	}
	for _, c := range cases {
		e, err := store.ParseURL(c.url)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", c.url, err)
			continue
		}
		if e.Kind != c.kind || !slices.Equal(e.Addrs(), c.addrs) {
			t.Errorf("ParseURL(%q) = %s %v, want %s %v", c.url, e.Kind, e.Addrs(), c.kind, c.addrs)
		}
		if c.str != "" && e.String() != c.str {
			t.Errorf("ParseURL(%q).String() = %q, want %q", c.url, e.String(), c.str)
		}
		if strings.Contains(e.String(), "pw") {
			t.Errorf("ParseURL(%q).String() = %q shows the password", c.url, e.String())
		}
	}
}

func TestParseURLRefuses(t *testing.T) {
	cases := []struct{ url, want string }{
		{"not a url", "no scheme"},
		{"10.0.0.1:7000", "no scheme"},
		{"http://s3cret@host", "invalid URL scheme"},
		{"redis+cluster://h1:7000/3", "only database 0"},
		{"redis+cluster://h1:7000,,h2:7000", "empty address"},
		{"redis+cluster://h1:7000?pool_size=x", "pool_size"},
		{"redis+sentinel://s1:26379", "no master name"},
		{"redis+sentinel://s1:26379/m/0/x", "more than a master name"},
		{"redis+sentinel://s1:26379/m?password=s3cret", "option password"},
		{"redis+sentinel://s1:26379/m/x", "database"},
		{"redis://:s3cret@host:port", "invalid port"},
		{"redis+cluster://:s3cret@h1:port,h2:7000", "invalid port"},
	}
	for _, c := range cases {
		_, err := store.ParseURL(c.url)
		if err == nil {
			t.Errorf("ParseURL(%q): no error, want %q", c.url, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseURL(%q) = %q, want it to say %q", c.url, err, c.want)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseURL(%q) = %q shows the password", c.url, err)
		}
	}
}

// The URL's password is the master's, which the store logs in to; the
// sentinels' own comes from Endpoint.SentinelPassword
// (RALPH_REDIS_SENTINEL_PASSWORD).
func TestSentinelCredentials(t *testing.T) {
	url := meshtest.RedisSentinel(t, "masterpw", "sentinelpw")
	ctx := context.Background()
	e, err := store.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	if rdb, err := e.Connect(ctx); err == nil {
		_ = rdb.Close()
		t.Fatal("Connect without the sentinels' password: want an error")
	}
	e.SentinelPassword = "sentinelpw"
	rdb, err := e.Connect(ctx)
	if err != nil {
		t.Fatalf("Connect with both passwords: %v", err)
	}
	defer rdb.Close()
	st := store.New(rdb, meshtest.Prefix(t), time.Minute)
	if _, err := st.SaveState(ctx, "s1", 0, state{Phase: "through sentinel"}); err != nil {
		t.Fatal(err)
	}
}

// suiteEnv marks the test binary run again by runSuiteOn, so that it does
// not start another deployment from inside.
const suiteEnv = "RALPH_TEST_STORE_SUITE_ON"

// The store's whole suite, run again against a real three-master Redis
// Cluster: every script and transaction must touch one hash slot (Redis
// Cluster refuses a script across slots with CROSSSLOT).
func TestSuiteOnRedisCluster(t *testing.T) {
	if os.Getenv(suiteEnv) != "" {
		t.Skip("inside a run of the suite on another deployment")
	}
	url := meshtest.RedisCluster(t)
	runSuiteOn(t, url)

	// A cluster client's transaction across slots does not fail: go-redis
	// splits it into one MULTI per slot, silently not atomic. So the keys
	// of a session must share its slot, whatever the suite saw.
	ctx := context.Background()
	rdb, err := store.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	prefix := meshtest.Prefix(t)
	st := store.New(rdb, prefix, time.Minute)
	masters := map[string]bool{}
	for i := range 8 {
		session := fmt.Sprintf("s%d", i)
		touchAll(t, st, session)
		keys, err := meshtest.Keys(ctx, rdb, prefix+":{"+session+"}:*")
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) < 6 {
			t.Fatalf("session %s has keys %v, want every kind", session, keys)
		}
		slots := map[int64]bool{}
		for _, k := range keys {
			slot, err := rdb.ClusterKeySlot(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			slots[slot] = true
		}
		if len(slots) != 1 {
			t.Fatalf("session %s's keys %v are on %d slots, want 1", session, keys, len(slots))
		}
		n, err := rdb.(*redis.ClusterClient).MasterForKey(ctx, keys[0])
		if err != nil {
			t.Fatal(err)
		}
		masters[n.Options().Addr] = true
	}
	if len(masters) < 2 {
		t.Fatalf("8 sessions all on master %v: the cluster was not really used", masters)
	}
}

// The suite again, on a master found through Sentinel.
func TestSuiteOnRedisSentinel(t *testing.T) {
	if os.Getenv(suiteEnv) != "" {
		t.Skip("inside a run of the suite on another deployment")
	}
	runSuiteOn(t, meshtest.RedisSentinel(t, "", ""))
}

var passed = regexp.MustCompile(`(?m)^--- PASS: (Test\w+)`)

// runSuiteOn runs this package's tests again, in a child process of the
// same test binary, with RALPH_TEST_REDIS_URL set to url: meshtest gives
// every test that URL, so the whole suite runs on that deployment.
func runSuiteOn(t *testing.T, url string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.count=1", "-test.v", "-test.skip", "^TestSuiteOn|^TestSentinelCredentials$")
	cmd.Env = append(os.Environ(), "RALPH_TEST_REDIS_URL="+url, suiteEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the store's suite on %s failed: %v\n%s", url, err, out)
	}
	tests := passed.FindAllSubmatch(out, -1)
	// The tests that use Redis at all, by name: a child that ran none of
	// them proves nothing.
	for _, want := range []string{"TestSaveStateConcurrentCAS", "TestAppendUnitsIdempotent", "TestReplaceUnitsCompareAndSet", "TestCompactionHistoryAndCache"} {
		if !slices.ContainsFunc(tests, func(m [][]byte) bool { return string(m[1]) == want }) {
			t.Errorf("the suite on %s did not pass %s; output:\n%s", url, want, out)
		}
	}
	t.Logf("the store's suite passed on %s: %d tests", url, len(tests))
}
