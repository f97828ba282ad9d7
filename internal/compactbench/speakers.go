package compactbench

import (
	"fmt"
	"strings"
)

// speaker is one person the session writes a profile of. Everything the
// sources say about them is derived from these fields, so that the profile
// drafted later can quote the sources the way a writer does.
type speaker struct {
	Name, Slug      string
	He              bool // pronoun: he/him/his, else she/her/her
	Role, Org       string
	City, Country   string
	Field           string // what they work on, as a noun phrase
	Talk            string // talk title
	Topic           string // what the talk is about, a noun phrase
	Project         string // a named project
	ProjectWhat     string // what the project is, a noun phrase
	Metric          string // what it achieved, a verb phrase in the past tense
	PrevRole        string
	PrevOrg         string
	FirstJob        string
	StartYear       int // joined Org
	CareerYear      int // first job
	TeamSize        int
	Tool            string // the technology they are known for
	Mistake         string // what went wrong, a clause in the past tense
	Lesson          string // what they learnt, a clause
	Quote           string
	Hobby           string
	SecondSource    bool   // a career-notes file besides the interview
	MissingCitation string // a source the first draft cites that does not exist
	NoRoleLine      bool   // the first draft forgets the Role: line
}

// speakers are the twelve speakers of the fictional Northwind Summit 2026.
var speakers = []speaker{
	{
		Name: "Ana Ferreira", Slug: "ana-ferreira", Role: "Staff engineer", Org: "Quayline Logistics",
		City: "Porto", Country: "Portugal", Field: "database operations",
		Talk: "Shipping schema changes without a maintenance window", Topic: "online schema migrations on busy PostgreSQL clusters",
		Project: "Tidemark", ProjectWhat: "an online migration runner that copies tables in the background and swaps them atomically",
		Metric:   "replaced a nine-hour Sunday maintenance window with zero-downtime migrations across 340 tables",
		PrevRole: "database administrator", PrevOrg: "Banco Atlântico", FirstJob: "a support engineer at a Lisbon hosting company",
		StartYear: 2019, CareerYear: 2011, TeamSize: 6, Tool: "PostgreSQL",
		Mistake: "a backfill job locked the orders table for eleven minutes on a Friday afternoon",
		Lesson:  "every migration step has to be resumable and every lock has to have a timeout",
		Quote:   "A migration is finished when you can stop it halfway and nobody notices.",
		Hobby:   "restoring old fishing boats on the Douro", SecondSource: true,
	},
	{
		Name: "Kwame Mensah", Slug: "kwame-mensah", He: true, Role: "Platform lead", Org: "Sankofa Health",
		City: "Accra", Country: "Ghana", Field: "offline-first systems",
		Talk: "Offline-first clinics: syncing records over unreliable links", Topic: "conflict-free sync of patient records between clinics and the cloud",
		Project: "Adinkra Sync", ProjectWhat: "a sync engine that merges patient records edited offline in different clinics",
		Metric:   "kept 112 rural clinics in sync over links that drop almost a third of their packets",
		PrevRole: "mobile developer", PrevOrg: "Volta Telecom", FirstJob: "a teaching assistant in the computer science department at Legon",
		StartYear: 2018, CareerYear: 2012, TeamSize: 9, Tool: "CRDTs on SQLite",
		Mistake: "two clinics merged the same patient's allergy list and one allergy disappeared for a week",
		Lesson:  "a merge rule has to be explained to a nurse before it is allowed into the code",
		Quote:   "The network is a rumour; the clinic is the truth.",
		Hobby:   "coaching an under-fourteen football team in Osu", SecondSource: true,
	},
	{
		Name: "Lin Zhao", Slug: "lin-zhao", Role: "Principal site reliability engineer", Org: "Brightwater Cloud",
		City: "Singapore", Country: "Singapore", Field: "site reliability",
		Talk: "Error budgets people actually use", Topic: "turning service level objectives into decisions product teams accept",
		Project: "Budget Board", ProjectWhat: "a weekly review where product owners spend or save their error budget in the open",
		Metric:   "cut paging incidents by forty percent in a year while release frequency doubled",
		PrevRole: "systems engineer", PrevOrg: "Straits Exchange", FirstJob: "a network operations analyst on night shifts",
		StartYear: 2017, CareerYear: 2009, TeamSize: 14, Tool: "Prometheus",
		Mistake: "the first error budget policy froze releases for a month and the product teams simply stopped reading it",
		Lesson:  "a policy nobody can negotiate with is a policy nobody follows",
		Quote:   "An error budget is a conversation, not a fine.",
		Hobby:   "long-distance swimming around Sentosa", SecondSource: true, NoRoleLine: true,
	},
	{
		Name: "Mateo Álvarez", Slug: "mateo-alvarez", He: true, Role: "Compiler engineer", Org: "Ferrocarril Labs",
		City: "Valencia", Country: "Spain", Field: "build systems",
		Talk: "Making a build five times faster by deleting things", Topic: "finding and removing the work a build does for nobody",
		Project: "Poda", ProjectWhat: "a build profiler that marks every target nobody consumes",
		Metric:   "took the monorepo build from fifty minutes to ten by removing dead targets and duplicate code generation",
		PrevRole: "toolchain developer", PrevOrg: "a chip design start-up in Barcelona", FirstJob: "an intern on the LLVM backend of a graphics driver",
		StartYear: 2020, CareerYear: 2013, TeamSize: 4, Tool: "Bazel",
		Mistake: "he deleted a target that only the release pipeline used and broke a release at midnight",
		Lesson:  "the build graph you see is never the build graph you have",
		Quote:   "The fastest step in a build is the one you no longer run.",
		Hobby:   "cooking paella for thirty people on a wood fire",
	},
	{
		Name: "Priya Raghunathan", Slug: "priya-raghunathan", Role: "Security engineer", Org: "Lattice Pay",
		City: "Bengaluru", Country: "India", Field: "application security",
		Talk: "Secrets rotation at 3 a.m.: automating the boring emergency", Topic: "rotating leaked credentials automatically and safely",
		Project: "Rekey", ProjectWhat: "a rotation service that replaces a leaked credential everywhere it is used within minutes",
		Metric:   "brought the time to rotate a leaked database password from two days to seven minutes",
		PrevRole: "penetration tester", PrevOrg: "a Chennai security consultancy", FirstJob: "a QA engineer on a banking app",
		StartYear: 2019, CareerYear: 2012, TeamSize: 7, Tool: "Vault",
		Mistake: "an early rotation run replaced a key that a batch job had cached and the nightly settlement failed",
		Lesson:  "a secret is not rotated until the last reader has picked up the new one",
		Quote:   "If rotating a secret is scary, you will not do it when it matters.",
		Hobby:   "Carnatic violin, badly, every morning", SecondSource: true,
	},
	{
		Name: "Jonas Lindqvist", Slug: "jonas-lindqvist", He: true, Role: "Staff engineer, observability", Org: "Norrsken Energy",
		City: "Umeå", Country: "Sweden", Field: "observability",
		Talk: "Tracing a power grid", Topic: "distributed tracing for industrial control systems",
		Project: "Polstjärna", ProjectWhat: "a tracing pipeline that follows a command from the control room to a substation and back",
		Metric:   "found the cause of a recurring two-second control delay that had puzzled the grid operators for three winters",
		PrevRole: "control systems engineer", PrevOrg: "a hydropower operator in Luleå", FirstJob: "a field technician at wind farms",
		StartYear: 2018, CareerYear: 2008, TeamSize: 8, Tool: "OpenTelemetry",
		Mistake: "his first tracing agent used so much memory on the substation gateways that two of them rebooted",
		Lesson:  "on constrained hardware you sample at the edge and ask questions later",
		Quote:   "A trace is a story the system tells you, if you let it finish the sentence.",
		Hobby:   "cross-country skiing under the northern lights", SecondSource: true,
	},
	{
		Name: "Amara Okafor", Slug: "amara-okafor", Role: "Engineering manager", Org: "Kite Mobility",
		City: "Lagos", Country: "Nigeria", Field: "engineering management",
		Talk: "From four to forty without losing on-call sanity", Topic: "growing an engineering team and its on-call rotation at the same pace",
		Project: "Relay", ProjectWhat: "an on-call programme that pairs every new engineer with a shadow rotation before their first page",
		Metric:   "grew the team from four to forty engineers while pages per engineer fell by half",
		PrevRole: "backend engineer", PrevOrg: "a Lagos fintech", FirstJob: "a developer at a university spin-off building exam software",
		StartYear: 2020, CareerYear: 2013, TeamSize: 40, Tool: "incident reviews",
		Mistake: "she let a single senior engineer carry the pager for six weeks and he burnt out",
		Lesson:  "on-call load is a management metric, not a personal virtue",
		Quote:   "Nobody should learn the system for the first time at 3 a.m.",
		Hobby:   "playing the talking drum in a Sunday band", MissingCitation: "sources/07-amara-okafor-notes.md",
	},
	{
		Name: "Hiroshi Tanaka", Slug: "hiroshi-tanaka", He: true, Role: "Embedded systems engineer", Org: "Kumo Robotics",
		City: "Osaka", Country: "Japan", Field: "embedded software",
		Talk: "Rust on the factory floor", Topic: "moving robot controller firmware from C to Rust",
		Project: "Kaze", ProjectWhat: "a Rust runtime for the motion controllers of assembly-line robots",
		Metric:   "ran eighteen months on 600 robots without a single memory-safety fault",
		PrevRole: "firmware engineer", PrevOrg: "a camera maker in Kyoto", FirstJob: "a maintenance engineer on a car assembly line",
		StartYear: 2019, CareerYear: 2010, TeamSize: 5, Tool: "Rust",
		Mistake: "the first Rust build did not fit in the controller's flash memory",
		Lesson:  "a safe language is only adopted when it also fits the hardware budget",
		Quote:   "The robot does not care what language you like; it cares whether it stops in time.",
		Hobby:   "building wooden puzzle boxes", SecondSource: true,
	},
	{
		Name: "Sofia Marchetti", Slug: "sofia-marchetti", Role: "Data engineer", Org: "Arco Analytics",
		City: "Bologna", Country: "Italy", Field: "stream processing",
		Talk: "Streaming joins that survive late data", Topic: "joining event streams when events arrive hours late",
		Project: "Ritardo", ProjectWhat: "a join operator that keeps state for late events and corrects results it already emitted",
		Metric:   "brought the error of the hourly revenue dashboard from six percent to under half a percent",
		PrevRole: "analytics engineer", PrevOrg: "a Milan fashion retailer", FirstJob: "a statistician at a regional hospital",
		StartYear: 2021, CareerYear: 2014, TeamSize: 6, Tool: "Apache Flink",
		Mistake: "a watermark set too aggressively silently dropped a weekend of mobile orders",
		Lesson:  "late data is not an exception to handle but a normal case to design for",
		Quote:   "Every dashboard is wrong; the question is whether it knows by how much.",
		Hobby:   "cycling the hills above the city on a steel bike older than she is", SecondSource: true,
	},
	{
		Name: "Daniel Cohen", Slug: "daniel-cohen", He: true, Role: "Developer experience lead", Org: "Meridian Games",
		City: "Montréal", Country: "Canada", Field: "developer experience",
		Talk: "The ten-minute onboarding", Topic: "getting a new engineer from laptop to first merged change in ten minutes",
		Project: "Launchpad", ProjectWhat: "a reproducible development environment that starts the whole game backend on a laptop",
		Metric:   "cut the time from a new hire's first login to their first merged change from nine days to one afternoon",
		PrevRole: "gameplay programmer", PrevOrg: "a studio in Québec City", FirstJob: "a tester on a hockey video game",
		StartYear: 2018, CareerYear: 2011, TeamSize: 5, Tool: "Nix",
		Mistake: "the first version of the environment needed forty gigabytes and new hires spent their first morning downloading it",
		Lesson:  "developer experience is measured in minutes, and the first minutes count double",
		Quote:   "Onboarding is the only product every engineer uses.",
		Hobby:   "playing goalie in a Tuesday night beer league",
	},
	{
		Name: "Fatima Al-Sayed", Slug: "fatima-al-sayed", Role: "Machine learning infrastructure engineer", Org: "Dune Systems",
		City: "Amman", Country: "Jordan", Field: "machine learning infrastructure",
		Talk: "GPU scheduling for small teams", Topic: "sharing a few expensive GPUs fairly between research and production",
		Project: "Qafila", ProjectWhat: "a scheduler that lends idle production GPUs to research jobs and takes them back within seconds",
		Metric:   "raised GPU utilisation from thirty-one to seventy-eight percent without delaying a single production inference",
		PrevRole: "research engineer", PrevOrg: "a university lab in Irbid", FirstJob: "a web developer for a news site",
		StartYear: 2021, CareerYear: 2014, TeamSize: 3, Tool: "Kubernetes",
		Mistake: "the scheduler pre-empted a three-day training run an hour before it finished",
		Lesson:  "pre-emption is only fair when checkpoints are cheap and automatic",
		Quote:   "An idle GPU is the most expensive thing in the building.",
		Hobby:   "hiking the Jordan Trail in sections, one long weekend at a time", SecondSource: true,
	},
	{
		Name: "Tomasz Nowak", Slug: "tomasz-nowak", He: true, Role: "Open-source maintainer", Org: "the Kestrel HTTP project",
		City: "Wrocław", Country: "Poland", Field: "open-source maintenance",
		Talk: "Maintaining a library used by millions, on weekends", Topic: "keeping a widely used open-source library healthy with volunteer time",
		Project: "Kestrel", ProjectWhat: "an HTTP client library downloaded several million times a week",
		Metric:   "brought the open issue count from 1,400 to under 200 and found two co-maintainers",
		PrevRole: "backend developer", PrevOrg: "a Wrocław e-commerce company", FirstJob: "a student contributor fixing typos in documentation",
		StartYear: 2015, CareerYear: 2012, TeamSize: 3, Tool: "Go",
		Mistake: "he merged a well-meant performance patch that broke proxies for thousands of corporate users",
		Lesson:  "a maintainer's first job is saying no kindly",
		Quote:   "Popularity is not funding, and stars do not review pull requests.",
		Hobby:   "restoring a 1970s Polish motorcycle",
	},
}

// pronouns returns subject, object and possessive pronouns.
func (s speaker) pronouns() (subj, obj, poss string) {
	if s.He {
		return "he", "him", "his"
	}
	return "she", "her", "her"
}

// first is the speaker's first name.
func (s speaker) first() string { return strings.Fields(s.Name)[0] }

// surname is the last word of the speaker's name.
func (s speaker) surname() string {
	f := strings.Fields(s.Name)
	return f[len(f)-1]
}

// number is the speaker's two-digit number, 01 to 12.
func number(i int) string { return fmt.Sprintf("%02d", i+1) }

func interviewPath(i int) string {
	return "sources/" + number(i) + "-" + speakers[i].Slug + "-interview.md"
}

func cvPath(i int) string { return "sources/" + number(i) + "-" + speakers[i].Slug + "-cv.md" }

func profilePath(i int) string { return "profiles/p" + number(i) + ".md" }

// sourcePaths are the speaker's real source files.
func sourcePaths(i int) []string {
	ps := []string{interviewPath(i)}
	if speakers[i].SecondSource {
		ps = append(ps, cvPath(i))
	}
	return ps
}

// fill replaces {placeholders} in a template with the speaker's fields.
func (s speaker) fill(tmpl string, other speaker) string {
	subj, obj, poss := s.pronouns()
	r := strings.NewReplacer(
		"{name}", s.Name, "{first}", s.first(), "{surname}", s.surname(),
		"{He}", capitalize(subj), "{he}", subj, "{him}", obj, "{his}", poss, "{His}", capitalize(poss),
		"{role}", s.Role, "{arole}", article(s.Role), "{org}", s.Org, "{city}", s.City, "{country}", s.Country,
		"{field}", s.Field, "{talk}", s.Talk, "{topic}", s.Topic,
		"{project}", s.Project, "{projectWhat}", s.ProjectWhat, "{metric}", s.Metric,
		"{prevRole}", s.PrevRole, "{aprevRole}", article(s.PrevRole), "{prevOrg}", s.PrevOrg, "{firstJob}", s.FirstJob,
		"{startYear}", fmt.Sprint(s.StartYear), "{careerYear}", fmt.Sprint(s.CareerYear),
		"{years}", fmt.Sprint(2026-s.CareerYear), "{orgYears}", fmt.Sprint(2026-s.StartYear),
		"{teamSize}", fmt.Sprint(s.TeamSize), "{tool}", s.Tool,
		"{mistake}", s.Mistake, "{lesson}", s.Lesson, "{quote}", s.Quote, "{hobby}", s.Hobby,
		"{other}", other.Name, "{otherFirst}", other.first(), "{otherCity}", other.City, "{otherOrg}", other.Org,
		"{otherField}", other.Field,
	)
	return r.Replace(tmpl)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// article puts "a" or "an" before a role, lower-cased.
func article(role string) string {
	r := strings.ToLower(role)
	if strings.ContainsRune("aeiou", rune(r[0])) {
		return "an " + r
	}
	return "a " + r
}
