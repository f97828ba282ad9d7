package settings

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

type Inner struct {
	Wait time.Duration `split_words:"true" default:"30s"`
}

type sample struct {
	Inner
	Count   int     `default:"4"`
	Ratio   float64 `default:"0.70"`
	On      bool    `default:"true"`
	Name    string  `default:"ralph"`
	NoDef   int
	Skipped int `ignored:"true" default:"9"`
}

func TestDefaultsComeFromTheTagsWhateverTheEnvironment(t *testing.T) {
	t.Setenv("COUNT", "99")
	t.Setenv(noEnvPrefix+"_X", "1")
	got := Defaults[sample]()
	want := sample{Inner: Inner{Wait: 30 * time.Second}, Count: 4, Ratio: 0.70, On: true, Name: "ralph"}
	if got != want {
		t.Fatalf("Defaults = %+v, want %+v", got, want)
	}
}

func TestDefaultsRefuseEnvconfigTags(t *testing.T) {
	type leaky struct {
		User string `envconfig:"USER"`
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "field User") {
			t.Fatalf("recover() = %v, want a panic naming the field", r)
		}
	}()
	Defaults[leaky]()
}

func TestDefaultsPanicOnABadTag(t *testing.T) {
	type bad struct {
		N int `default:"four"`
	}
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("a malformed default was accepted")
		}
	}()
	Defaults[bad]()
}

func TestFillZeroKeepsWhatIsSet(t *testing.T) {
	s := sample{Count: 7, NoDef: 3}
	FillZero(&s)
	want := sample{Inner: Inner{Wait: 30 * time.Second}, Count: 7, Ratio: 0.70, On: true, Name: "ralph", NoDef: 3}
	if s != want {
		t.Fatalf("FillZero = %+v, want %+v", s, want)
	}
}

func TestJoinAndEach(t *testing.T) {
	if Join(nil, Check(true, "A", 0, "fine")) != nil {
		t.Fatal("Join of nothing is not nil")
	}
	sentinel := errors.New("invalid options")
	err := fmt.Errorf("%w: %w", sentinel, Join(Check(false, "A", 0, "must be %d", 1), nil, Check(false, "B", "x", "bad")))
	if got, want := err.Error(), "invalid options: A: must be 1, got 0; B: bad, got x"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, sentinel) {
		t.Fatal("sentinel lost")
	}
	var fields []string
	Each(err, func(i *Invalid) { fields = append(fields, i.Field) })
	if strings.Join(fields, ",") != "A,B" {
		t.Fatalf("Each saw %v", fields)
	}
}
