package settings

import "testing"

func TestMaskURL(t *testing.T) {
	cases := []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"", ""},
		{"nats://ralph:s3cret@nats:4222", "nats://ralph:****@nats:4222"},
		{"nats://t0ken@nats:4222", "nats://****@nats:4222"},
		{"redis://:s3cret@10.0.0.5:6379/0", "redis://:****@10.0.0.5:6379/0"},
		{"rediss://default:s3cret@cache:6380", "rediss://default:****@cache:6380"},
		{"tls://a:p1@n1:4222,tls://b:p2@n2:4222", "tls://a:****@n1:4222,tls://b:****@n2:4222"},
		{"nats://a:p1@n1:4222, t0ken@n2:4222", "nats://a:****@n1:4222, ****@n2:4222"},
		{"u:p@host:4222", "u:****@host:4222"},
		// Not parsable as a URL, still masked: the password holds '/', '#', '%' or '@'.
		{"nats://u:pa/ss#w%zz@host:4222", "nats://u:****@host:4222"},
		{"redis://u:p@ss@host:6379", "redis://u:****@host:6379"},
		{"redis://%zz", "redis://%zz"},
	}
	for _, c := range cases {
		if got := MaskURL(c.in); got != c.want {
			t.Errorf("MaskURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
