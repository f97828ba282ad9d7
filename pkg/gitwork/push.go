package gitwork

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ralphmesh/ralph/pkg/gitref"
	"github.com/ralphmesh/ralph/pkg/settings"
)

// RemoteURL is where a push to remote goes: its pushurl, else its url.
// The session reads it when it starts, before the agent has run in this
// session, and keeps it: the repository's configuration is agent-writable
// afterwards.
func (r *Repo) RemoteURL(ctx context.Context, remote string) (string, error) {
	if err := gitref.ValidRemote(remote); err != nil {
		return "", err
	}
	for _, key := range []string{"remote." + remote + ".pushurl", "remote." + remote + ".url"} {
		res, err := r.host(ctx, hardened, "config", "--get", key)
		if err != nil {
			return "", err
		}
		if v := strings.TrimSpace(string(res.out)); res.exitCode == 0 && v != "" {
			return r.absoluteURL(v), nil
		}
	}
	return "", fmt.Errorf("%s has no remote %q (git remote -v lists them)", r.dir, remote)
}

// absoluteURL makes a remote that is a relative path absolute, since the
// push runs from another directory. A URL ("scheme://") and scp-like
// syntax ("host:path", a colon before any slash) are left as they are.
func (r *Repo) absoluteURL(u string) string {
	if strings.Contains(u, "://") || filepath.IsAbs(u) {
		return u
	}
	if i := strings.IndexByte(u, ':'); i >= 0 && !strings.Contains(u[:i], "/") {
		return u
	}
	return filepath.Join(r.dir, u)
}

// Push sends commit sha as branch to url. It needs the service's own
// credentials (an SSH agent, the user's credential helper), so it cannot
// run in the sandbox; and it must not read the workspace's configuration,
// which the agent could have written (a credential helper, an ssh command,
// a receive-pack program are all commands git runs). So it pushes from a
// fresh bare repository of its own that borrows the workspace's objects
// (objects/info/alternates) and has only the user's configuration: the
// user's pre-push hooks run, the workspace's do not.
func (r *Repo) Push(ctx context.Context, url, branch, sha string) error {
	if err := gitref.ValidBranch(branch); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "ralph-push-")
	if err != nil {
		return fmt.Errorf("push %s: %w", branch, err)
	}
	defer os.RemoveAll(tmp)
	clean := &Repo{dir: tmp, cfg: r.cfg}
	env := passThrough("SSH_AUTH_SOCK", "GIT_SSH_COMMAND", "GIT_SSH", "GIT_ASKPASS", "SSH_ASKPASS")
	steps := [][]string{
		{"init", "--quiet", "--bare", tmp},
		{"--git-dir=" + tmp, "update-ref", "refs/heads/" + branch, sha},
		{"--git-dir=" + tmp, "push", "--porcelain", "--end-of-options", url, "refs/heads/" + branch + ":refs/heads/" + branch},
	}
	for i, args := range steps {
		if i == 1 {
			alt := filepath.Join(r.dir, ".git", "objects") + "\n"
			if err := os.WriteFile(filepath.Join(tmp, "objects", "info", "alternates"), []byte(alt), 0o644); err != nil {
				return fmt.Errorf("push %s: %w", branch, err)
			}
		}
		res, err := clean.hostEnv(ctx, [][2]string{{"protocol.ext.allow", "never"}}, env, args...)
		if err != nil {
			return fmt.Errorf("push %s: %s", branch, scrub(err.Error(), url))
		}
		if res.exitCode != 0 {
			return fmt.Errorf("push %s to %s: %w: exit %d: %s", branch, MaskURL(url), ErrGit, res.exitCode,
				scrub(firstLines(append(res.out, res.stderr...), 6), url))
		}
	}
	return nil
}

// URLDigest identifies a remote's URL without holding it: the session
// keeps the digest (a URL may carry a token, which must not reach Redis or
// an event) and pushes only while the remote's URL still has it.
func URLDigest(url string) string {
	sum := sha256.Sum256([]byte(url))
	return hex.EncodeToString(sum[:])
}

// MaskURL hides the password or token of a URL with a scheme
// (https://user:token@host -> https://user:****@host); an scp-like
// git@host:path names a user, not a secret, and stays.
func MaskURL(url string) string {
	if !strings.Contains(url, "://") {
		return url
	}
	return settings.MaskURL(url)
}

// scrub replaces url, and the secret in it, in text (git may quote the URL
// it was given) with the masked form.
func scrub(text, url string) string {
	masked := MaskURL(url)
	if masked == url {
		return text
	}
	text = strings.ReplaceAll(text, url, masked)
	rest := url[strings.Index(url, "://")+len("://"):]
	userinfo := rest[:max(strings.LastIndex(rest, "@"), 0)]
	secret := userinfo // a user without a password is a token
	if _, pw, found := strings.Cut(userinfo, ":"); found {
		secret = pw
	}
	if secret != "" {
		text = strings.ReplaceAll(text, secret, "****")
	}
	return text
}

// passThrough is the service's own values of the variables names: how it
// reaches its credentials.
func passThrough(names ...string) []string {
	var env []string
	for _, k := range names {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}
