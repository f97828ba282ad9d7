package builder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/tools"
)

// envelopeReserve is what an iteration.completed needs of the server's max
// payload besides its record: the envelope's own fields and the header that
// carries the message id, a few hundred bytes (ids are bounded: a session
// id of 64 characters, a task id of 64), with room to spare.
const envelopeReserve = 4096

// RecordBudget is the most an IterationRecord may take, JSON-encoded, for
// its iteration.completed to fit in a server whose max payload is
// maxPayload.
func RecordBudget(maxPayload int64) int { return int(maxPayload) - envelopeReserve }

// ErrRecordTooLarge: an iteration's record cannot be made to fit in an
// event even with everything large in it kept as an artifact.
var ErrRecordTooLarge = errors.New("iteration record too large for an event")

// quotedLineBytes bounds the error line a bare pointer to a failed call's
// output keeps, so the stuck detector can still tell one failure from
// another.
const quotedLineBytes = 512

// boundRecord makes rec, whose tool calls hold their outputs whole, fit in
// an event. An output larger than inline bytes travels as its pointer
// digest (the form the context gives the model, tools.PointerDigest) with
// its artifact id. Then, while the encoded record is over budget, what is
// largest becomes a pointer, in this order: the tool outputs, the tool
// errors, the tool arguments, and last the model's text, which the stuck
// detector compares for repetition and so keeps as a digest of whole lines.
// Each is stored whole as an artifact first (put returns its id); artifact
// ids are content-addressed, so the same text always gives the same
// pointer, and the detector still sees a repeat as a repeat.
func boundRecord(ctx context.Context, rec events.IterationRecord, inline, budget int, put func(context.Context, string) (string, error)) (events.IterationRecord, error) {
	rec.ToolCalls = slices.Clone(rec.ToolCalls)
	parts := recordParts(&rec, inline)
	for _, p := range parts {
		if p.tier == tierOutput && len(p.full) > inline {
			if err := p.shrinkTo(ctx, levelDigest, put); err != nil {
				return rec, err
			}
		}
	}
	size, err := encodedSize(rec)
	if err != nil {
		return rec, err
	}
	if size <= budget {
		return rec, nil
	}
	// Largest first within each tier: the fewest pointers that make it fit.
	slices.SortStableFunc(parts, func(a, b *part) int {
		if a.tier != b.tier {
			return a.tier - b.tier
		}
		return b.size() - a.size()
	})
	for _, p := range parts {
		if size <= budget {
			break
		}
		// A pointer to a short text is longer than the text.
		before := p.size()
		if p.level >= p.smallest() || p.sizeAt(p.smallest()) >= before {
			continue
		}
		if err := p.shrinkTo(ctx, p.smallest(), put); err != nil {
			return rec, err
		}
		size += p.size() - before
	}
	if size, err = encodedSize(rec); err != nil {
		return rec, err
	}
	if size > budget {
		return rec, fmt.Errorf("%w: iteration %d's record is %d bytes with every large output, error, argument and text kept as an artifact; an event may take %d",
			ErrRecordTooLarge, rec.Iteration, size, budget)
	}
	return rec, nil
}

// The kinds of text a record can carry as a pointer, in the order they are
// given up.
const (
	tierOutput = iota
	tierError
	tierArgs
	tierText
)

// Levels of a part: whole, a digest of whole lines, the pointer line.
const (
	levelWhole = iota
	levelDigest
	levelPointer
)

// part is one text of a record that can be replaced by a pointer.
type part struct {
	tier int
	// full is the text whole, id its artifact once stored.
	full, id string
	// failed marks the output or error of a failed call, whose error line
	// stays beside the pointer line.
	failed bool
	// inline is the builder's inline limit: a digest gets half of it, as
	// in the context.
	inline int
	// level is how the record carries the part now.
	level int
	// set writes the part's form into the record (and its artifact id, for
	// outputs).
	set func(form, id string)
}

func recordParts(rec *events.IterationRecord, inline int) []*part {
	var parts []*part
	for i := range rec.ToolCalls {
		c := &rec.ToolCalls[i]
		failed := c.Error != "" || c.ExitCode != 0
		if c.Output != "" {
			parts = append(parts, &part{tier: tierOutput, full: c.Output, failed: failed, inline: inline,
				set: func(form, id string) { c.Output, c.Artifact = form, id }})
		}
		if c.Error != "" {
			parts = append(parts, &part{tier: tierError, full: c.Error, failed: true, inline: inline,
				set: func(form, _ string) { c.Error = form }})
		}
		if len(c.Args) > 0 {
			parts = append(parts, &part{tier: tierArgs, full: string(c.Args), inline: inline,
				set: func(form, _ string) { c.Args = jsonString(form) }})
		}
	}
	if rec.AssistantText != "" {
		parts = append(parts, &part{tier: tierText, full: rec.AssistantText, inline: inline,
			set: func(form, _ string) { rec.AssistantText = form }})
	}
	return parts
}

// smallest is the level a part goes down to when the record must shrink:
// the pointer line, but for the model's text, which the detector compares
// for repetition, a digest of whole lines.
func (p *part) smallest() int {
	if p.tier == tierText {
		return levelDigest
	}
	return levelPointer
}

// form is the part's text at level, id standing for its artifact.
func (p *part) form(level int, id string) string {
	switch level {
	case levelDigest:
		return tools.PointerDigest(p.full, id, p.inline/2)
	case levelPointer:
		line := tools.SizePointer(p.full, id)
		if p.failed {
			if quote := tools.ErrorLine(p.full); quote != "" && len(quote) <= quotedLineBytes {
				line += "\n" + quote
			}
		}
		return line
	}
	return p.full
}

// sizeAt is the part's encoded size in the record at level, exactly as
// json.Marshal writes it, so that the record's size can be kept by adding
// up the changes.
func (p *part) sizeAt(level int) int {
	if level == levelWhole && p.tier == tierArgs {
		// Raw JSON, which Marshal compacts and HTML-escapes.
		b, err := json.Marshal(json.RawMessage(p.full))
		if err != nil {
			return len(p.full)
		}
		return len(b)
	}
	// Every artifact id has the same length, so a stand-in measures it.
	id := p.id
	if id == "" {
		id = "a-0000000000000000"
	}
	return len(jsonString(p.form(level, id)))
}

func (p *part) size() int { return p.sizeAt(p.level) }

// shrinkTo stores the part whole, once, and puts its form at level in the
// record.
func (p *part) shrinkTo(ctx context.Context, level int, put func(context.Context, string) (string, error)) error {
	if p.id == "" {
		id, err := put(ctx, p.full)
		if err != nil {
			return fmt.Errorf("store a large part of iteration's record as an artifact: %w", err)
		}
		p.id = id
	}
	p.level = level
	p.set(p.form(level, p.id), p.id)
	return nil
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s) // a string always encodes
	return b
}

func encodedSize(rec events.IterationRecord) (int, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return 0, fmt.Errorf("encode iteration %d's record: %w", rec.Iteration, err)
	}
	return len(b), nil
}
