package compactbench

import (
	"fmt"
	"strings"
)

// rng is splitmix64: a tiny deterministic generator, so that the session is
// the same on every Go release (math/rand makes no such promise for its
// methods).
type rng struct{ state uint64 }

func newRNG(seed string) *rng {
	h := uint64(14695981039346656037)
	for i := 0; i < len(seed); i++ {
		h ^= uint64(seed[i])
		h *= 1099511628211
	}
	return &rng{state: h}
}

func (r *rng) next() uint64 {
	r.state += 0x9e3779b97f4a7c15
	z := r.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }

// pick returns k distinct items of pool in a random order.
func (r *rng) pick(pool []string, k int) []string {
	idx := make([]int, len(pool))
	for i := range idx {
		idx[i] = i
	}
	for i := len(idx) - 1; i > 0; i-- {
		j := r.intn(i + 1)
		idx[i], idx[j] = idx[j], idx[i]
	}
	out := make([]string, 0, k)
	for _, i := range idx[:min(k, len(idx))] {
		out = append(out, pool[i])
	}
	return out
}

// question is one interview question with the sentences an answer to it is
// made of: the lead is always used, the pool is drawn from.
type question struct {
	q    string
	lead string
	pool []string
}

// interviewQuestions: the answers are the speaker's own words, filled from
// their fields, so every interview reads differently.
var interviewQuestions = []question{
	{
		q:    "How did you get into {field}?",
		lead: "I started in {careerYear} as {firstJob}, which taught me more about {field} than any course I took.",
		pool: []string{
			"Back then I did not even know {field} was a career; I just liked being the person who knew why something broke.",
			"My first manager handed me the pager in my second week and said the system would teach me the rest, which was half true.",
			"I spent most evenings of that first year reading postmortems from other companies and comparing them with what we did.",
			"After a few years as {aprevRole} at {prevOrg} I realised the interesting problems were the ones between teams, not inside them.",
			"What pulled me in was the feedback loop: you change one thing on Monday and by Friday the numbers tell you whether you were right.",
			"I was never the fastest programmer in the room, so I made myself useful by writing down how things actually worked.",
			"People assume there was a plan, but honestly every step came from somebody asking me to look at a problem nobody else wanted.",
			"The move to {city} happened almost by accident, because {org} was the only company that let me work on {field} full time.",
			"I still keep the notebook from my first on-call shift; most of what is in it is wrong, and I like being reminded of that.",
		},
	},
	{
		q:    "What do you do at {org} today?",
		lead: "I joined {org} in {startYear} and I am now {arole}, which in practice means I look after {field} for about {teamSize} people.",
		pool: []string{
			"A normal week is one third design reviews, one third writing code and one third convincing people that the boring fix is the right fix.",
			"I work closely with the product teams, because most of what I build only pays off if they change how they work as well.",
			"We keep a public log of every decision we make about {tool}, so a new engineer can see why things are the way they are.",
			"I try to ship something small every week, even when the big project is months away from done, because momentum is a feature.",
			"The team sits in {city}, but half of our users are in other time zones, so a lot of my job is writing things down clearly.",
			"I also run our internal reading group, where we take one incident report from another company apart every fortnight.",
			"My title changed twice since I joined, but the job has always been the same: make the risky thing routine.",
			"I say no to more requests than I say yes to, and I have learnt to explain the no in a way that people can plan around.",
		},
	},
	{
		q:    "Tell us about {project}.",
		lead: "{project} is {projectWhat}, and it is the thing I am proudest of at {org}.",
		pool: []string{
			"In its first full year it {metric}, which was more than any of us had promised when we pitched it.",
			"We built the first version in six weeks with {tool} and a lot of shell scripts we are not proud of.",
			"The hard part was never the code; it was agreeing on what should happen when two parts of the system disagree.",
			"We wrote the runbook before we wrote the code, and that order turned out to be the best decision of the project.",
			"Every release of {project} goes out to one small team first, and they are allowed to veto it for any reason at all.",
			"People outside the company ask whether they can use {project}, and the honest answer is that the ideas travel better than the code.",
			"The numbers people quote are nice, but what I care about is that nobody has been woken up by that problem since.",
			"We measured everything before we started, which meant that when the results came in nobody could argue with them.",
			"Half of {project} is monitoring for {project} itself, because a safety system you cannot see is just another risk.",
		},
	},
	{
		q:    "What went wrong along the way?",
		lead: "Plenty, and the worst moment was when {mistake}.",
		pool: []string{
			"We wrote a blameless review the next morning and the main finding was that our tests had never tried anything that large.",
			"What I took from it is that {lesson}.",
			"I still tell that story to every new person on the team, because it explains half of the rules we have.",
			"The fix itself was three lines; the work was in finding every other place where we had made the same assumption.",
			"My manager at the time asked one question, which was what would have told us earlier, and we have been answering it ever since.",
			"It was embarrassing, but it also got us the budget for the monitoring we had been asking for all year.",
			"We had a rollback plan, but nobody had ever practised it, and a plan you have not practised is a hope.",
			"Since then every risky change at {org} has a named person who is allowed to stop it without asking anyone.",
		},
	},
	{
		q:    "What will your talk cover?",
		lead: "The talk, \"{talk}\", is about {topic}.",
		pool: []string{
			"I will walk through the three designs we threw away before the one that worked, because the failures are where the lessons are.",
			"There will be real numbers from production, including the ones that make us look bad.",
			"I want people to leave with a checklist they can use on Monday, not with a product they have to buy.",
			"The second half is a live demo, so I am practising the apology for when the conference Wi-Fi fails.",
			"I will also show the dashboard we use every morning and explain which of its graphs turned out to be useless.",
			"Most talks on {field} show the happy path; I will spend most of my time on the unhappy ones.",
			"The audience does not need to know {tool}; everything I show has an equivalent in whatever they use.",
			"I end with the questions we still cannot answer, because I hope somebody in the room can.",
		},
	},
	{
		q:    "Who should come to it?",
		lead: "Anyone who has been asked to make {field} safer without being given more people to do it.",
		pool: []string{
			"Engineering managers will get as much out of it as engineers, because half of the story is about how decisions get made.",
			"If you run a team of fewer than ten people, most of what I say will apply directly to you.",
			"People who think their system is too small to need any of this are exactly the people I want in the room.",
			"I would also love to see people from {otherField}, because {otherFirst} and I keep finding that our problems rhyme.",
			"It is not a beginner talk, but it is not a deep dive into {tool} either; curiosity is the only prerequisite.",
			"Students are welcome; I wish somebody had given this talk when I was one.",
		},
	},
	{
		q:    "How is your team organised?",
		lead: "We are {teamSize} people, and we organise around problems rather than components.",
		pool: []string{
			"Everyone takes a turn on call, including me, and the rotation is planned a quarter ahead so nobody is surprised.",
			"We write a one-page proposal for anything that takes more than a week, and anyone in the company can comment on it.",
			"New joiners spend their first fortnight pairing with a different person every day, which is expensive and worth every hour.",
			"We have no separate operations team; the people who write the code are the people who run it.",
			"Every Friday we demo something, even if it is a graph or a deleted file, because showing work keeps us honest.",
			"When the team grew past eight we split the stand-up in two, which felt like a loss and turned out to be a relief.",
			"I first met {other} at a meetup in {otherCity}, and a lot of how we run our reviews comes from what {otherOrg} does.",
		},
	},
	{
		q:    "What advice would you give someone starting out?",
		lead: "Write things down, and assume the reader is you, tired, in a year.",
		pool: []string{
			"Volunteer for the incident reviews nobody wants to run; you learn the system faster there than anywhere else.",
			"Learn one tool deeply rather than ten tools a little, and for me that tool was {tool}.",
			"Ask what would happen if the thing you are building were used ten times more than planned, and then ask again.",
			"Find a mentor outside your company; they will tell you things your manager cannot.",
			"Do not be afraid of boring work; most of my career has been built on boring work done carefully.",
			"My favourite line, which I say far too often, is this: \"{quote}\"",
			"Take holidays, properly, with the laptop at home; a team that cannot run without you is a team you have failed.",
		},
	},
	{
		q:    "What do you do when you are not working?",
		lead: "Mostly {hobby}.",
		pool: []string{
			"It is the one place where nobody asks me about uptime.",
			"My family says it is the only time I am patient.",
			"I started it during the pandemic and never stopped, which says something about how much I needed it.",
			"It has taught me more about patience and small improvements than any management book.",
			"I am not good at it, and that is exactly why I like it.",
		},
	},
	{
		q:    "Anything you would like the programme to say about you?",
		lead: "Only that I am happy to talk to anyone about {field} in the corridor, before or after the talk.",
		pool: []string{
			"Please spell {org} correctly; people get it wrong more often than you would think.",
			"I would rather be introduced by what I have worked on than by my title.",
			"If anybody wants the slides in advance, they will be on the conference site the day before.",
			"And please mention {city}; we have a small but very good engineering community there.",
		},
	},
}

// interview is the speaker's interview transcript, the longer source.
func interview(i int) string {
	s := speakers[i]
	other := speakers[(i+5)%len(speakers)]
	r := newRNG("interview/" + s.Slug)
	var b strings.Builder
	fmt.Fprintf(&b, "# Interview: %s\n\n", s.Name)
	fmt.Fprintf(&b, "Conducted for the Northwind Summit 2026 programme by the speaker liaison team on %d March 2026, by video call. ", 2+i)
	b.WriteString("Lightly edited for length; the answers are the speaker's own words and may be quoted in the programme.\n\n")
	fmt.Fprintf(&b, "Speaker: %s, %s at %s (%s, %s)\nTalk: \"%s\"\n\n", s.Name, s.Role, s.Org, s.City, s.Country, s.Talk)
	for _, q := range interviewQuestions {
		fmt.Fprintf(&b, "**Q: %s**\n\n", s.fill(q.q, other))
		k := 4 + r.intn(3)
		answer := append([]string{q.lead}, r.pick(q.pool, k)...)
		for j := range answer {
			answer[j] = s.fill(answer[j], other)
		}
		fmt.Fprintf(&b, "A: %s\n\n", strings.Join(answer, " "))
	}
	b.WriteString("[End of interview. Recording kept by the liaison team for thirty days.]\n")
	return b.String()
}

var cvNotes = []string{
	"{name} was proposed by two members of the programme committee independently, which is rare.",
	"The committee liked that the proposal promises numbers from production rather than a product pitch.",
	"{He} has spoken at regional meetups in {city} and at one international conference; this is {his} first Northwind talk.",
	"Reviewers asked for more detail on what went wrong, and the revised abstract now covers the incident in which {mistake}.",
	"{His} team at {org} publishes its design documents, and the committee read two of them while reviewing the proposal.",
	"One reviewer worried the topic is too close to another talk; the committee decided the two complement each other.",
	"{He} asked for a slot in the morning, because the demo needs a rested audience and a rested speaker.",
	"The committee recommends pairing the talk with a hallway session, since {his} answers in the interview ran long.",
	"{His} slides from the {city} meetup were clear and sparing, and the committee expects the same here.",
	"Two committee members have worked with {him} before and describe {him} as careful, direct and generous with time.",
	"The abstract was rewritten once at the committee's request to lead with the problem rather than the solution.",
	"{He} confirmed that every number in the abstract can be printed, including the ones about the incident.",
	"The committee would like {him} to meet {other} during the summit, since their topics overlap more than their titles suggest.",
	"{He} volunteered to review two other proposals for next year's programme, which the committee gratefully accepted.",
}

// careerNotes is the speaker's career notes, the shorter second source.
func careerNotes(i int) string {
	s := speakers[i]
	other := speakers[(i+3)%len(speakers)]
	r := newRNG("cv/" + s.Slug)
	subj, _, poss := s.pronouns()
	var b strings.Builder
	fmt.Fprintf(&b, "# Career notes: %s\n\n", s.Name)
	b.WriteString("Compiled by the programme committee from the speaker's submission and public profiles. For internal use; check facts with the speaker before printing.\n\n")
	b.WriteString("## Positions\n\n")
	fmt.Fprintf(&b, "- %d to now: %s, %s (%s). Leads the work on %s; %s %s.\n", s.StartYear, s.Role, s.Org, s.City, s.Project, s.Project, s.Metric)
	fmt.Fprintf(&b, "- %d to %d: %s, %s. Worked on %s in a team of about a dozen people, with on-call duties from the first month.\n",
		s.CareerYear+3, s.StartYear, capitalize(s.PrevRole), s.PrevOrg, s.Field)
	fmt.Fprintf(&b, "- %d to %d: started as %s.\n\n", s.CareerYear, s.CareerYear+3, s.FirstJob)
	b.WriteString("## Talks and writing\n\n")
	fmt.Fprintf(&b, "- \"%s\", Northwind Summit 2026 (this programme). Topic: %s.\n", s.Talk, s.Topic)
	fmt.Fprintf(&b, "- \"What %s taught us about %s\", %s engineering meetup, %d.\n", s.Project, s.Field, s.City, s.StartYear+3)
	fmt.Fprintf(&b, "- \"Lessons from the night %s\", company engineering blog, %d.\n", s.Mistake, s.StartYear+2)
	fmt.Fprintf(&b, "- Panel on %s with %s (%s), online, 2025.\n\n", s.Field, other.Name, other.Org)
	b.WriteString("## Selected projects\n\n")
	fmt.Fprintf(&b, "- %s: %s. Outcome, as stated by the speaker: %s.\n", s.Project, s.ProjectWhat, s.Metric)
	fmt.Fprintf(&b, "- An internal guide to %s for new engineers at %s, now used by other teams as well; %s wrote most of it in %d.\n",
		s.Field, s.Org, subj, s.StartYear+1)
	fmt.Fprintf(&b, "- Contributions to the %s documentation and two workshops on %s at regional conferences.\n", s.Tool, s.Field)
	fmt.Fprintf(&b, "- At %s: an on-call handbook and a review checklist, both still in use according to former colleagues.\n\n", s.PrevOrg)
	b.WriteString("## Skills the speaker lists\n\n")
	fmt.Fprintf(&b, "%s, incident review, mentoring, technical writing, capacity planning and %s. %s names %s as the technology %s knows best and the one %s would teach first.\n\n",
		s.Tool, s.Field, capitalize(subj), s.Tool, subj, subj)
	b.WriteString("## Committee notes\n\n")
	notes := r.pick(cvNotes, 6+r.intn(4))
	for j := range notes {
		notes[j] = s.fill(notes[j], other)
	}
	b.WriteString(strings.Join(notes, " "))
	b.WriteString("\n\n## Practical details\n\n")
	fmt.Fprintf(&b, "- Travels from %s, %s; hotel booked by the organisers for two nights.\n", s.City, s.Country)
	fmt.Fprintf(&b, "- Outside work: %s, which %s mentioned unprompted in the interview.\n", s.Hobby, subj)
	fmt.Fprintf(&b, "- Prefers to be introduced as %s of %s, with %s talk title in full.\n", s.Role, s.Org, poss)
	return b.String()
}
