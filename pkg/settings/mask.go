package settings

import "strings"

// MaskURL hides the credentials in a NATS or Redis URL, or in a
// comma-separated list of them, before the URL is printed, logged or put in
// an error: a password becomes "****" and the user stays
// (nats://ralph:s3cret@host -> nats://ralph:****@host, redis://:pw@host ->
// redis://:****@host), and a user part without a password, which NATS
// reads as a token, is hidden whole (nats://t0ken@host -> nats://****@host).
//
// It works on the text, not on url.Parse's result, so that a URL that does
// not parse (a password holding '/', '#' or '%') is masked too: everything
// before the last '@' of each URL is credentials. Masking too much (an '@'
// in a query) hides only what was not secret.
func MaskURL(raw string) string {
	if !strings.Contains(raw, "@") {
		return raw
	}
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		parts[i] = maskOne(p)
	}
	return strings.Join(parts, ",")
}

func maskOne(p string) string {
	start := 0
	if i := strings.Index(p, "://"); i >= 0 {
		start = i + len("://")
	}
	at := strings.LastIndex(p, "@")
	if at < start {
		return p
	}
	userinfo := p[start:at]
	// Leading spaces of a list item are not part of the credentials.
	lead := len(userinfo) - len(strings.TrimLeft(userinfo, " "))
	userinfo = userinfo[lead:]
	masked := "****"
	if user, _, hasPassword := strings.Cut(userinfo, ":"); hasPassword {
		masked = user + ":****"
	}
	return p[:start+lead] + masked + p[at:]
}
