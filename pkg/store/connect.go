package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Kind is the shape of the Redis deployment a URL names.
type Kind string

// The deployments the store runs on. Every key of a session carries the
// session as a hash tag and every script and transaction touches one
// session's keys only (or one global key), so the store needs nothing else
// from a Cluster.
const (
	// Single is one Redis server (redis://, rediss://, unix://).
	Single Kind = "redis"
	// Cluster is a Redis Cluster, reached through any of its nodes.
	Cluster Kind = "cluster"
	// Sentinel is a master found through Redis Sentinel, followed when it
	// fails over.
	Sentinel Kind = "sentinel"
)

// Schemes of the URLs that are not go-redis's own.
const (
	clusterScheme  = "redis+cluster"
	sentinelScheme = "redis+sentinel"
	sentinelPort   = "26379"
)

// Endpoint is where the store's Redis is, parsed from RALPH_REDIS_URL by
// ParseURL; Connect opens a client on it.
type Endpoint struct {
	Kind Kind
	// SentinelPassword authenticates to the sentinels themselves, when
	// they require it (RALPH_REDIS_SENTINEL_PASSWORD); the URL's own
	// password is the Redis servers'. It is a setting rather than part of
	// the URL so that it is masked like every secret.
	SentinelPassword string

	single   *redis.Options
	cluster  *redis.ClusterOptions
	failover *redis.FailoverOptions
}

// ParseURL reads a Redis URL without connecting:
//
//   - redis://[user:password@]host:port[/db][?option=value...] (rediss://
//     for TLS; unix:///path/to/socket) is one server, as go-redis's
//     ParseURL reads it;
//   - redis+cluster://[user:password@]host:port[,host:port...][?option=value...]
//     (rediss+cluster:// for TLS) is a Redis Cluster: one node is enough, the
//     others are found from it, and more seeds may follow, comma-separated or
//     as addr=host:port options (go-redis's ParseClusterURL);
//   - host:port,host:port[,...] (two or more, no scheme) is a Redis Cluster
//     without a password;
//   - redis+sentinel://[user:password@]host:port[,host:port...]/master[/db][?option=value...]
//     (rediss+sentinel:// for TLS) is the master that Sentinel names
//     master, reached through any of the listed sentinels (port 26379 when
//     none is given); the user and password are the Redis servers' (the
//     sentinels' own is Endpoint.SentinelPassword).
//
// The options are go-redis's (dial_timeout=3s, pool_size=20, ...). Errors
// never quote the URL, which may hold a password.
func ParseURL(raw string) (Endpoint, error) {
	raw = strings.TrimSpace(raw)
	scheme, rest, hasScheme := strings.Cut(raw, "://")
	if !hasScheme {
		if !strings.Contains(raw, ",") {
			return Endpoint{}, errors.New("no scheme: write redis://HOST:PORT for one server, redis+cluster://HOST:PORT for a Redis Cluster, or redis+sentinel://HOST:PORT/MASTER for Sentinel")
		}
		return parseCluster("redis", raw)
	}
	switch scheme {
	case clusterScheme, "rediss+cluster":
		return parseCluster(strings.TrimSuffix(scheme, "+cluster"), rest)
	case sentinelScheme, "rediss+sentinel":
		return parseSentinel(strings.TrimSuffix(scheme, "+sentinel"), rest)
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return Endpoint{}, safe(err)
	}
	return Endpoint{Kind: Single, single: o}, nil
}

// parseCluster reads the part after "scheme+cluster://".
func parseCluster(scheme, rest string) (Endpoint, error) {
	u, err := seeds(scheme, rest, "")
	if err != nil {
		return Endpoint{}, err
	}
	if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
		return Endpoint{}, fmt.Errorf("database %q: a Redis Cluster has only database 0", p)
	}
	u.Path = ""
	o, err := redis.ParseClusterURL(u.String())
	if err != nil {
		return Endpoint{}, safe(err)
	}
	return Endpoint{Kind: Cluster, cluster: o}, nil
}

// parseSentinel reads the part after "scheme+sentinel://": the path is the
// master's name, then optionally the database.
func parseSentinel(scheme, rest string) (Endpoint, error) {
	u, err := seeds(scheme, rest, sentinelPort)
	if err != nil {
		return Endpoint{}, err
	}
	path := strings.Split(strings.Trim(u.Path, "/"), "/")
	if path[0] == "" {
		return Endpoint{}, errors.New("no master name: write redis+sentinel://HOST:PORT/MASTER")
	}
	if len(path) > 2 {
		return Endpoint{}, errors.New("path has more than a master name and a database")
	}
	q := u.Query()
	for _, k := range []string{"password", "username", "master_name"} {
		if q.Has(k) {
			return Endpoint{}, fmt.Errorf("option %s: the master is the URL's path, and the credentials its user info (which is masked wherever the URL is shown)", k)
		}
	}
	q.Set("master_name", path[0])
	if len(path) == 2 {
		q.Set("db", path[1])
	}
	// go-redis reads the URL's user info as the sentinels' credentials; in
	// ours they are the servers', which is what a store needs to log in to.
	user := u.User
	u.User, u.Path, u.RawQuery = nil, "", q.Encode()
	o, err := redis.ParseFailoverURL(u.String())
	if err != nil {
		return Endpoint{}, safe(err)
	}
	if user != nil {
		o.Username = user.Username()
		o.Password, _ = user.Password()
	}
	return Endpoint{Kind: Sentinel, failover: o}, nil
}

// seeds turns "[userinfo@]host[:port][,host[:port]...][/path][?query]" into
// a go-redis URL: the first host as the URL's, the others as addr= options.
// A host without a port gets defPort ("" leaves go-redis's 6379).
func seeds(scheme, rest, defPort string) (*url.URL, error) {
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	userinfo, hostlist := "", authority
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo, hostlist = authority[:at+1], authority[at+1:]
	}
	var hosts []string
	for h := range strings.SplitSeq(hostlist, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			return nil, errors.New("an empty address in the list")
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			if defPort == "" {
				defPort = "6379"
			}
			h = net.JoinHostPort(strings.Trim(h, "[]"), defPort)
		}
		hosts = append(hosts, h)
	}
	u, err := url.Parse(scheme + "://" + userinfo + hosts[0] + tail)
	if err != nil {
		return nil, safe(err)
	}
	if len(hosts) > 1 {
		q := u.Query()
		for _, h := range hosts[1:] {
			q.Add("addr", h)
		}
		u.RawQuery = q.Encode()
	}
	return u, nil
}

// safe drops the URL from url.Parse's errors (it may hold a password) and
// go-redis's "redis: " from its own, which would say Redis twice.
func safe(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	if msg, ok := strings.CutPrefix(err.Error(), "redis: "); ok {
		return errors.New(msg)
	}
	return err
}

// Addrs are the addresses the client starts from: the server, the cluster's
// seed nodes, or the sentinels.
func (e Endpoint) Addrs() []string {
	switch e.Kind {
	case Cluster:
		return e.cluster.Addrs
	case Sentinel:
		return e.failover.SentinelAddrs
	case Single:
		return []string{e.single.Addr}
	}
	return nil
}

// String names the endpoint for messages, without credentials:
// "redis 10.0.0.5:6379", "cluster 10.0.0.5:7000,10.0.0.6:7000",
// "sentinel 10.0.0.7:26379 (master mymaster)".
func (e Endpoint) String() string {
	s := string(e.Kind) + " " + strings.Join(e.Addrs(), ",")
	if e.Kind == Sentinel {
		s += " (master " + e.failover.MasterName + ")"
	}
	return s
}

// Client opens a client on the endpoint without checking it answers. A
// zero Endpoint has none.
func (e Endpoint) Client() (redis.UniversalClient, error) {
	switch e.Kind {
	case Single:
		return redis.NewClient(e.single), nil
	case Cluster:
		return redis.NewClusterClient(e.cluster), nil
	case Sentinel:
		o := *e.failover
		o.SentinelPassword = e.SentinelPassword
		return redis.NewFailoverClient(&o), nil
	}
	return nil, errors.New("no Redis endpoint (parse a URL with store.ParseURL)")
}

// Connect opens a client on the endpoint and pings it.
func (e Endpoint) Connect(ctx context.Context) (redis.UniversalClient, error) {
	rdb, err := e.Client()
	if err != nil {
		return nil, err
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis %s: %w", e, err)
	}
	return rdb, nil
}

// Connect opens a client from a Redis URL (see ParseURL) and pings it.
func Connect(ctx context.Context, rawURL string) (redis.UniversalClient, error) {
	e, err := ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parse redis URL: %w", err)
	}
	return e.Connect(ctx)
}
