package deploytest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/services/console"
)

// chartDir is the chart, from this package's directory.
var chartDir = filepath.Join("..", "..", "deploy", "helm", "ralph")

// kubeVersion is what helm renders for: user namespaces for the sandboxed
// pods (hostUsers: false with procMount: Unmasked) need Kubernetes 1.33.
const kubeVersion = "1.33.0"

// helm runs the helm pinned in go.mod (go tool helm) in the chart's
// directory.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"tool", "helm"}, args...)...)
	cmd.Dir = chartDir
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stderr.String(), out.String())
	}
	return out.String(), nil
}

// ScaledObject is KEDA's keda.sh/v1alpha1 ScaledObject as its CRD
// documents it, the fields the chart may set and no others: decoding with
// unknown fields refused catches a misspelt or misplaced one. (KEDA's own
// Go module pulls every scaler's cloud SDK into the build; its API is
// small and stable.)
type ScaledObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"metadata"`
	Spec struct {
		ScaleTargetRef struct {
			APIVersion             string `json:"apiVersion,omitempty"`
			Kind                   string `json:"kind,omitempty"`
			Name                   string `json:"name"`
			EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
		} `json:"scaleTargetRef"`
		PollingInterval *int32 `json:"pollingInterval,omitempty"`
		CooldownPeriod  *int32 `json:"cooldownPeriod,omitempty"`
		MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`
		Triggers        []struct {
			Type              string            `json:"type"`
			Name              string            `json:"name,omitempty"`
			MetricType        string            `json:"metricType,omitempty"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
				Kind string `json:"kind,omitempty"`
			} `json:"authenticationRef,omitempty"`
		} `json:"triggers"`
	} `json:"spec"`
}

// manifests is one rendering, decoded.
type manifests struct {
	deployments   map[string]*appsv1.Deployment
	services      map[string]*corev1.Service
	configMaps    map[string]*corev1.ConfigMap
	secrets       map[string]*corev1.Secret
	claims        map[string]*corev1.PersistentVolumeClaim
	pdbs          map[string]*policyv1.PodDisruptionBudget
	hpas          map[string]*autoscalingv2.HorizontalPodAutoscaler
	scaledObjects map[string]*ScaledObject
	accounts      map[string]*corev1.ServiceAccount
}

// decodeManifests decodes every document helm rendered into its
// Kubernetes API type, strictly: an unknown or duplicate field, a wrong
// type or a kind the chart should not render fails the test.
func decodeManifests(t *testing.T, rendered string) manifests {
	t.Helper()
	m := manifests{
		deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
		claims: map[string]*corev1.PersistentVolumeClaim{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		hpas: map[string]*autoscalingv2.HorizontalPodAutoscaler{}, scaledObjects: map[string]*ScaledObject{},
		accounts: map[string]*corev1.ServiceAccount{},
	}
	strict := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(rendered)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("split the rendered manifests: %v", err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("rendered document is not YAML: %v\n%s", err, doc)
		}
		if head.APIVersion == "keda.sh/v1alpha1" && head.Kind == "ScaledObject" {
			js, err := yaml.YAMLToJSON(doc)
			if err != nil {
				t.Fatal(err)
			}
			var so ScaledObject
			dec := json.NewDecoder(bytes.NewReader(js))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&so); err != nil {
				t.Fatalf("ScaledObject: %v\n%s", err, doc)
			}
			m.scaledObjects[so.Metadata.Name] = &so
			continue
		}
		obj, _, err := strict.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s %s does not decode strictly: %v\n%s", head.APIVersion, head.Kind, err, doc)
		}
		switch o := obj.(type) {
		case *appsv1.Deployment:
			m.deployments[o.Name] = o
		case *corev1.Service:
			m.services[o.Name] = o
		case *corev1.ConfigMap:
			m.configMaps[o.Name] = o
		case *corev1.Secret:
			m.secrets[o.Name] = o
		case *corev1.PersistentVolumeClaim:
			m.claims[o.Name] = o
		case *policyv1.PodDisruptionBudget:
			m.pdbs[o.Name] = o
		case *autoscalingv2.HorizontalPodAutoscaler:
			m.hpas[o.Name] = o
		case *corev1.ServiceAccount:
			m.accounts[o.Name] = o
		default:
			t.Fatalf("the chart renders a %T, which this test does not know: add its checks", obj)
		}
	}
	return m
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// stages are the services that consume a stage of the stream, each through
// its own durable consumer; the console only watches.
func stages() []string {
	return slices.DeleteFunc(slices.Clone(mesh.Services), func(s string) bool { return s == console.Name })
}

// checkSettings fails for a RALPH_* name the binary does not know.
func checkSettings(t *testing.T, where string, names []string) {
	t.Helper()
	var environ []string
	for _, n := range names {
		if strings.HasPrefix(n, "RALPH_") {
			environ = append(environ, n+"=x")
		}
	}
	for _, w := range config.Unknown(environ) {
		t.Errorf("%s: %s", where, w)
	}
}

type rendering struct {
	name string
	args []string
	// engine is the autoscaler expected: "keda", "hpa" or "" (none).
	engine string
	// sandbox says whether the builder and the critic get the sandbox's
	// security context.
	sandbox bool
	// secret, claim: the names the pods must reference.
	secret, claim string
}

func TestChartRendersValidManifests(t *testing.T) {
	if _, err := helm(t, "lint", "--strict", "."); err != nil {
		t.Fatal(err)
	}
	if _, err := helm(t, "lint", "--strict", ".", "-f", "ci/production-values.yaml"); err != nil {
		t.Fatal(err)
	}
	for _, r := range []rendering{
		{name: "default values", engine: "hpa", sandbox: true, secret: "ralph-secrets", claim: "ralph-workspaces"},
		{name: "default values on a cluster with KEDA", args: []string{"--api-versions", "keda.sh/v1alpha1/ScaledObject"},
			engine: "keda", sandbox: true, secret: "ralph-secrets", claim: "ralph-workspaces"},
		{name: "production values", args: []string{"-f", "ci/production-values.yaml"},
			engine: "keda", sandbox: true, secret: "ralph-credentials", claim: "ralph-workspaces"},
		{name: "no autoscaling, no sandbox, existing claim",
			args:   []string{"--set", "autoscaling.enabled=false,sandbox.enabled=false,workspaces.existingClaim=shared-ws,autoscaling.hpa.backlogMetric=x"},
			engine: "", sandbox: false, secret: "ralph-secrets", claim: "shared-ws"},
		{name: "hpa on the backlog metric", args: []string{"--set", "autoscaling.engine=hpa,autoscaling.hpa.backlogMetric=ralph_consumer_pending"},
			engine: "hpa", sandbox: true, secret: "ralph-secrets", claim: "ralph-workspaces"},
	} {
		t.Run(r.name, func(t *testing.T) {
			out, err := helm(t, append([]string{"template", "ralph", ".", "--kube-version", kubeVersion}, r.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			checkChart(t, r, decodeManifests(t, out))
		})
	}
}

func checkChart(t *testing.T, r rendering, m manifests) {
	const prefix = "ralph-"
	if len(m.deployments) != len(mesh.Services) {
		t.Errorf("%d Deployments, want one per service (%v)", len(m.deployments), mesh.Services)
	}
	cm := m.configMaps["ralph-config"]
	if cm == nil {
		t.Fatalf("no ConfigMap ralph-config; have %v", keys(m.configMaps))
	}
	checkSettings(t, "ConfigMap", keys(cm.Data))
	for _, want := range []string{"RALPH_NATS_URL", "RALPH_REDIS_URL", "RALPH_LLM_BASE_URL", "RALPH_METRICS_ADDR", "RALPH_STREAM_REPLICAS"} {
		if cm.Data[want] == "" {
			t.Errorf("ConfigMap has no %s", want)
		}
	}
	if r.secret == "ralph-secrets" {
		s := m.secrets[r.secret]
		if s == nil {
			t.Fatalf("no Secret %s rendered", r.secret)
		}
		checkSettings(t, "Secret", keys(s.StringData))
	} else if len(m.secrets) != 0 {
		t.Errorf("Secrets %v rendered although secret.existingSecret is set", keys(m.secrets))
	}
	if r.claim == "ralph-workspaces" {
		pvc := m.claims[r.claim]
		if pvc == nil || !slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteMany) {
			t.Errorf("workspaces claim %s: %+v, want one ReadWriteMany", r.claim, pvc)
		}
	} else if len(m.claims) != 0 {
		t.Errorf("claims %v rendered although workspaces.existingClaim is set", keys(m.claims))
	}
	def, err := config.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	stream := events.StreamName(def.Prefix)

	for _, name := range mesh.Services {
		d := m.deployments[prefix+name]
		if d == nil {
			t.Errorf("no Deployment for %s", name)
			continue
		}
		pod := d.Spec.Template.Spec
		if len(pod.Containers) != 1 {
			t.Fatalf("%s: %d containers", name, len(pod.Containers))
		}
		c := pod.Containers[0]
		if !slices.Equal(c.Args, []string{"service", name}) {
			t.Errorf("%s runs %v, want [service %s]", name, c.Args, name)
		}
		checkProbe(t, name, "liveness", c.LivenessProbe, "/healthz", c.Ports)
		checkProbe(t, name, "readiness", c.ReadinessProbe, "/readyz", c.Ports)
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: resources %+v, want a CPU request and a memory limit", name, c.Resources)
		}
		checkEnv(t, name, c, r)
		for k, v := range d.Spec.Selector.MatchLabels {
			if d.Spec.Template.Labels[k] != v {
				t.Errorf("%s: the selector %v does not select its own pods %v", name, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
			}
		}
		checkSecurity(t, name, d, r)
		sandboxed := name == "builder" || name == "critic"
		mountsWS := slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.MountPath == "/workspaces" })
		if sandboxed != mountsWS {
			t.Errorf("%s mounts /workspaces: %v, want %v (the builder and the critic share them)", name, mountsWS, sandboxed)
		}
		if sandboxed && !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
			return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == r.claim
		}) {
			t.Errorf("%s: no volume from claim %s", name, r.claim)
		}

		stage := slices.Contains(stages(), name)
		if stage {
			checkScaler(t, name, d, m, r, stream)
			pdb := m.pdbs[prefix+name]
			if pdb == nil {
				t.Errorf("no PodDisruptionBudget for %s", name)
			} else if !selects(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
				t.Errorf("%s: the budget's selector %v misses its pods %v", name, pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
			}
		} else if m.hpas[prefix+name] != nil || m.scaledObjects[prefix+name] != nil {
			t.Errorf("%s is autoscaled, but it is no stage", name)
		}
		if (r.engine == "" || !stage) && d.Spec.Replicas == nil {
			t.Errorf("%s has no replicas although nothing scales it", name)
		}
		if r.engine != "" && stage && d.Spec.Replicas != nil {
			t.Errorf("%s sets replicas although its autoscaler owns them", name)
		}
	}
	svc := m.services[prefix+console.Name]
	if svc == nil {
		t.Fatalf("no Service for the console; have %v", keys(m.services))
	}
	if !selects(svc.Spec.Selector, m.deployments[prefix+console.Name].Spec.Template.Labels) || svc.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("console Service %+v does not reach the console's http port", svc.Spec)
	}
}

func checkProbe(t *testing.T, name, kind string, p *corev1.Probe, path string, ports []corev1.ContainerPort) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s: no HTTP %s probe", name, kind)
		return
	}
	if p.HTTPGet.Path != path {
		t.Errorf("%s: %s probe on %s, want %s", name, kind, p.HTTPGet.Path, path)
	}
	if !slices.ContainsFunc(ports, func(cp corev1.ContainerPort) bool {
		return cp.Name == p.HTTPGet.Port.String() && cp.ContainerPort == 9464
	}) {
		t.Errorf("%s: %s probe port %s is not the container's metrics port 9464", name, kind, p.HTTPGet.Port.String())
	}
}

func checkEnv(t *testing.T, name string, c corev1.Container, r rendering) {
	t.Helper()
	if len(c.EnvFrom) != 2 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != "ralph-config" ||
		c.EnvFrom[1].SecretRef == nil || c.EnvFrom[1].SecretRef.Name != r.secret {
		t.Errorf("%s: envFrom %+v, want the ConfigMap then the Secret %s", name, c.EnvFrom, r.secret)
	}
	var names []string
	for _, e := range c.Env {
		names = append(names, e.Name)
	}
	checkSettings(t, name+" env", names)
}

func checkSecurity(t *testing.T, name string, d *appsv1.Deployment, r rendering) {
	t.Helper()
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	ps, cs := pod.SecurityContext, c.SecurityContext
	if ps == nil || cs == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser == 0 {
		t.Fatalf("%s: pod security %+v, want a non-root user", name, ps)
	}
	if cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation || cs.Capabilities == nil ||
		!slices.Equal(cs.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(cs.Capabilities.Add) != 0 ||
		cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem {
		t.Errorf("%s: container security %+v, want no escalation, every capability dropped, none added, a read-only root", name, cs)
	}
	sandboxed := r.sandbox && (name == "builder" || name == "critic")
	unconfined := ps.SeccompProfile != nil && ps.SeccompProfile.Type == corev1.SeccompProfileTypeUnconfined
	ownUsers := pod.HostUsers != nil && !*pod.HostUsers
	unmasked := cs.ProcMount != nil && *cs.ProcMount == corev1.UnmaskedProcMount
	if sandboxed != unconfined || sandboxed != ownUsers || sandboxed != unmasked {
		t.Errorf("%s: seccomp unconfined %v, own user namespace %v, /proc unmasked %v; want all %v (only the sandboxed services need them)",
			name, unconfined, ownUsers, unmasked, sandboxed)
	}
	if !sandboxed && (ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault) {
		t.Errorf("%s: seccomp %+v, want RuntimeDefault", name, ps.SeccompProfile)
	}
	noSandbox := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "RALPH_SANDBOX_MODE" && e.Value == "none" })
	if want := !r.sandbox && (name == "builder" || name == "critic"); noSandbox != want {
		t.Errorf("%s: RALPH_SANDBOX_MODE=none is set: %v, want %v", name, noSandbox, want)
	}
}

// checkScaler checks that the stage's autoscaler targets its Deployment
// and reads its own consumer's backlog.
func checkScaler(t *testing.T, name string, d *appsv1.Deployment, m manifests, r rendering, stream string) {
	t.Helper()
	so, hpa := m.scaledObjects[d.Name], m.hpas[d.Name]
	switch r.engine {
	case "":
		if so != nil || hpa != nil {
			t.Errorf("%s is autoscaled with autoscaling off", name)
		}
	case "keda":
		if hpa != nil || so == nil {
			t.Fatalf("%s: ScaledObject %v, HPA %v; want a ScaledObject only", name, so != nil, hpa != nil)
		}
		if so.Spec.ScaleTargetRef.Name != d.Name || len(so.Spec.Triggers) != 1 {
			t.Fatalf("%s: ScaledObject %+v", name, so.Spec)
		}
		tr := so.Spec.Triggers[0]
		if tr.Type != "nats-jetstream" || tr.Metadata["stream"] != stream || tr.Metadata["consumer"] != name ||
			tr.Metadata["natsServerMonitoringEndpoint"] == "" || tr.Metadata["lagThreshold"] == "" {
			t.Errorf("%s: trigger %+v, want nats-jetstream on stream %s, consumer %s", name, tr, stream, name)
		}
	case "hpa":
		if so != nil || hpa == nil {
			t.Fatalf("%s: ScaledObject %v, HPA %v; want an HPA only", name, so != nil, hpa != nil)
		}
		if hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.ScaleTargetRef.Name != d.Name {
			t.Errorf("%s: HPA targets %+v", name, hpa.Spec.ScaleTargetRef)
		}
		for _, metric := range hpa.Spec.Metrics {
			if metric.External != nil && metric.External.Metric.Selector.MatchLabels["consumer"] != name {
				t.Errorf("%s: HPA's backlog metric selects %v, want consumer=%s", name, metric.External.Metric.Selector, name)
			}
		}
	}
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// The schema refuses values no install could use, naming them.
func TestChartSchemaRefusesBadValues(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"services.builder.maxReplicas=0", "/services/builder/maxReplicas"},
		{"autoscaling.engine=vpa", "/autoscaling/engine"},
		{"nats.url=http://nats:4222", "/nats/url"},
		{"services.builder.replcas=2", "replcas"},
		{"config.LOG_LEVEL=debug", "LOG_LEVEL"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, err := helm(t, "template", "ralph", ".", "--kube-version", kubeVersion, "--set", tc.set)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template --set %s: %v; want a schema error naming %s", tc.set, err, tc.want)
			}
		})
	}
}
