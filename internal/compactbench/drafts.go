package compactbench

import (
	"fmt"
	"strings"
)

const brief = `# Brief: speaker profiles and programme overview, Northwind Summit 2026

The programme committee has confirmed twelve speakers. For the printed programme and the website we
need one profile per speaker and an overview document that introduces the programme.

## Profiles

- One file per speaker: profiles/p01.md to profiles/p12.md, numbered like the sources.
- Each profile starts with the speaker's name as a heading, then four header lines, in this order:
  Role: (title and organisation), Based in: (city and country), Talk: (the title in quotes) and
  Sources: (the source files the profile draws on, comma-separated, paths relative to the workspace).
- Then three short paragraphs: who the speaker is and how they got there; the work they are known
  for, with the numbers they gave us; what the talk covers and who it is for. A sentence on life
  outside work is welcome if the speaker mentioned it.
- End with a pull quote from the interview, as a Markdown quote line.
- At most 450 words. Write for engineers, not for recruiters: no superlatives, no buzzwords.
- Quote the speakers' own words where you can, and never invent a fact or a number.

## Overview

- final.md introduces the programme in one paragraph, then has one section per speaker, headed
  "## Name: Talk title", of two or three sentences drawn from that speaker's profile and the pull quote.
- It ends with a short section on the threads that connect the talks.
- At most 2,500 words.

## Checks

- sh scripts/check_profiles.sh checks the header lines, the pull quote and the length of every profile.
- sh scripts/check_links.sh checks that every file named in a Sources: line exists.
- sh scripts/check_final.sh checks that final.md has a section and a pull quote for every speaker.

The committee reads drafts in this repository; please keep the files in plain Markdown.
`

const checkProfilesScript = `#!/bin/sh
# Checks every profile for its header lines, a pull quote and the word limit.
set -u
n=$(ls profiles/p*.md | wc -l)
echo "checking $n profiles in profiles/"
bad=0
for f in profiles/p*.md; do
  problems=0
  for h in "Role:" "Based in:" "Talk:" "Sources:"; do
    grep -q "^$h" "$f" || { echo "error: $f: missing the '$h' line"; problems=1; }
  done
  grep -q '^> ' "$f" || { echo "error: $f: no pull quote"; problems=1; }
  w=$(wc -w < "$f")
  [ "$w" -le 450 ] || { echo "error: $f: $w words, over the limit of 450"; problems=1; }
  if [ $problems -eq 0 ]; then echo "$f: ok, $w words"; else bad=$((bad + 1)); fi
done
if [ $bad -gt 0 ]; then echo "$bad of $n profiles have problems"; exit 1; fi
echo "all $n profiles ok"
`

const checkLinksScript = `#!/bin/sh
# Checks that every file named in a profile's Sources: line exists.
set -u
n=$(ls profiles/p*.md | wc -l)
echo "checking source references in $n profiles"
bad=0
for f in profiles/p*.md; do
  ok=1
  for ref in $(sed -n 's/^Sources: //p' "$f" | tr -d ','); do
    [ -f "$ref" ] || { echo "error: $f: Sources: $ref does not exist"; ok=0; }
  done
  [ $ok -eq 1 ] || bad=$((bad + 1))
done
if [ $bad -gt 0 ]; then echo "$((n - bad)) of $n profiles ok"; exit 1; fi
echo "all references of $n profiles resolve"
`

const checkFinalScript = `#!/bin/sh
# Checks that final.md has a pull quote in every speaker's section and stays
# within 2,500 words.
set -u
[ -f final.md ] || { echo "error: final.md does not exist"; exit 1; }
awk -v words="$(wc -w < final.md)" '
  /^## / && !/^## Threads/ { name = substr($0, 4); sub(/:.*/, "", name); n++; order[n] = name }
  /^> / && n { quoted[order[n]] = 1; q++ }
  END {
    printf "final.md: %d words, %d speaker sections, %d pull quotes\n", words, n, q
    for (i = 1; i <= n; i++) if (!(order[i] in quoted)) { print "error: final.md: the section for " order[i] " has no pull quote"; bad++ }
    if (words > 2500) { print "error: final.md: " words " words, over the limit of 2500"; bad++ }
    if (bad) { print bad " problems"; exit 1 }
    print "ok"
  }' final.md
`

// initialFiles is the workspace the session starts from.
func initialFiles() map[string]string {
	files := map[string]string{
		"brief.md":                  brief,
		"scripts/check_profiles.sh": checkProfilesScript,
		"scripts/check_links.sh":    checkLinksScript,
		"scripts/check_final.sh":    checkFinalScript,
	}
	for i := range speakers {
		files[interviewPath(i)] = interview(i)
		if speakers[i].SecondSource {
			files[cvPath(i)] = careerNotes(i)
		}
	}
	return files
}

// outline is the plan the builder writes before drafting.
func outline() string {
	var b strings.Builder
	b.WriteString("# Outline of final.md\n\n")
	b.WriteString("1. Introduction: twelve speakers, one question: how small teams make risky work routine.\n")
	b.WriteString("2. One section per speaker, in programme order, from the profiles:\n")
	for i, s := range speakers {
		fmt.Fprintf(&b, "   - p%s %s (%s, %s): %s\n", number(i), s.Name, s.Org, s.City, s.Field)
	}
	b.WriteString("3. Threads across the programme: safety as routine, small teams, people before tools.\n\n")
	b.WriteString("Working order: read each speaker's sources, draft the profile straight away, run the checks every few\n")
	b.WriteString("profiles, then reread all twelve profiles before writing final.md.\n")
	return b.String()
}

// profileHeader is the header block of speaker i's profile; the first draft
// may lack the Role line or cite a source that does not exist.
func profileHeader(i int, first bool) string {
	s := speakers[i]
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", s.Name)
	if !(first && s.NoRoleLine) {
		b.WriteString(roleLine(i))
	}
	fmt.Fprintf(&b, "Based in: %s, %s\n", s.City, s.Country)
	fmt.Fprintf(&b, "Talk: \"%s\"\n", s.Talk)
	refs := sourcePaths(i)
	if s.MissingCitation != "" {
		refs = append(refs, s.MissingCitation)
	}
	fmt.Fprintf(&b, "Sources: %s\n", strings.Join(refs, ", "))
	return b.String()
}

func roleLine(i int) string {
	return fmt.Sprintf("Role: %s, %s\n", speakers[i].Role, speakers[i].Org)
}

// routineSentence is the profile sentence the revisions rewrite.
func routineSentence(i int) string {
	return speakers[i].fill("Colleagues describe {him} as the person who makes the risky thing routine.", speakers[i])
}

func revisedRoutineSentence(i int) string {
	return speakers[i].fill("At {org}, {he} is the one people ask before anything risky goes to production.", speakers[i])
}

// profile is the builder's first draft of speaker i's profile. It draws on
// the sources the way a writer does: the facts, the phrases and the quote.
func profile(i int) string {
	s := speakers[i]
	var b strings.Builder
	b.WriteString(profileHeader(i, true))
	b.WriteString("\n")
	b.WriteString(s.fill("{name} is {arole} at {org} in {city}, where {he} has worked on {field} since {startYear}. "+
		"{He} started in {careerYear} as {firstJob} and spent the years before {org} as {aprevRole} at {prevOrg}. ", s))
	b.WriteString(routineSentence(i))
	b.WriteString("\n\n")
	b.WriteString(s.fill("{His} best-known work is {project}, {projectWhat}. In its first full year it {metric}. "+
		"The project was not painless: {mistake}, and the lesson {first} took from it is that {lesson}.", s))
	b.WriteString("\n\n")
	b.WriteString(s.fill("{His} talk, \"{talk}\", is about {topic}. Expect real numbers from production, the designs that "+
		"were thrown away on the way, and a checklist to use on Monday. {His} team of {teamSize} at {org} works with {tool}, "+
		"but the ideas apply whatever you use. Outside work, {first} spends {his} free time {hobby}.", s))
	b.WriteString("\n\n")
	fmt.Fprintf(&b, "> \"%s\"\n", s.Quote)
	return b.String()
}

// quoteless is the speaker whose section the first final.md forgets to
// end with the pull quote.
const quoteless = 7

const finalIntro = "Twelve speakers, twelve cities, one question running through the whole programme: how do small teams " +
	"make risky work routine?"

const finalIntroRevised = "Twelve speakers from twelve cities share one question this year: how does a small team make risky work routine?"

// finalSection is speaker i's section of final.md, drawn from the profile.
func finalSection(i int, withQuote bool) string {
	s := speakers[i]
	var b strings.Builder
	fmt.Fprintf(&b, "## %s: %s\n\n", s.Name, s.Talk)
	b.WriteString(s.fill("{name}, {arole} at {org} in {city}, talks about {topic}. {His} project {project}, {projectWhat}, "+
		"{metric}. {He} will also tell the story of the day {mistake}, and why {he} now believes that {lesson}.", s))
	b.WriteString("\n")
	if withQuote {
		fmt.Fprintf(&b, "\n> \"%s\"\n", s.Quote)
	}
	return b.String()
}

// final is the builder's first draft of final.md.
func final() string {
	var b strings.Builder
	b.WriteString("# Northwind Summit 2026: meet the speakers\n\n")
	b.WriteString(finalIntro + " ")
	b.WriteString("This year's talks range from database migrations in Porto to robot firmware in Osaka and GPU " +
		"scheduling in Amman, and every speaker comes with numbers from production rather than a product pitch. The " +
		"sections below are drawn from interviews with the speakers and from the programme committee's notes; the " +
		"talks are listed in programme order.\n\n")
	for i := range speakers {
		b.WriteString(finalSection(i, i != quoteless))
		b.WriteString("\n")
	}
	b.WriteString("## Threads across the programme\n\n")
	fmt.Fprintf(&b, "Three threads run through the talks. The first is safety as a routine: %s, %s and %s each describe "+
		"how a frightening operation became a weekly non-event. The second is the small team: %s, %s and %s work with "+
		"fewer than ten people and have learnt to say no. The third is people before tools: %s and %s talk as much about "+
		"on-call rotations and onboarding as about technology. Come for one talk, and stay for the conversations "+
		"between them.\n", speakers[0].Name, speakers[4].Name, speakers[8].Name, speakers[3].Name, speakers[10].Name,
		speakers[11].Name, speakers[6].Name, speakers[9].Name)
	return b.String()
}
