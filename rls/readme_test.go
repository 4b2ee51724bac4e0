package rls

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestREADMEBootstrapIsEnvoys: the Envoy bootstrap of the README's
// "Using tokenring as Envoy's rate limit service" is one Envoy takes: every
// field and typed config decodes into go-control-plane's types, which
// validate it (protoc-gen-validate's rules, as Envoy checks them).
func TestREADMEBootstrapIsEnvoys(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Using tokenring as Envoy's rate limit service")
	if !ok {
		t.Fatal("README has no section \"Using tokenring as Envoy's rate limit service\"")
	}
	_, block, ok := strings.Cut(section, "```yaml\nstatic_resources:")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("the section has no bootstrap (a yaml block starting with static_resources:)")
	}
	var doc any
	if err := yaml.Unmarshal([]byte("static_resources:"+block), &doc); err != nil {
		t.Fatalf("the bootstrap is not YAML: %v", err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("the bootstrap is not Envoy's: %v", err)
	}
	if err := validateAll(&b); err != nil {
		t.Fatalf("the bootstrap does not validate: %v", err)
	}
	if n := len(b.GetStaticResources().GetClusters()); n != 2 {
		t.Errorf("%d clusters, want tokenring's and the upstream's", n)
	}
}

// TestEnvoyDocRateLimitsAreEnvoys: the route's rate_limits pair in
// docs/envoy.md decodes into Envoy's RateLimitPerRoute and validates.
func TestEnvoyDocRateLimitsAreEnvoys(t *testing.T) {
	doc, err := os.ReadFile("../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```yaml\nrate_limits:")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("docs/envoy.md has no rate_limits block")
	}
	var y any
	if err := yaml.Unmarshal([]byte("rate_limits:"+block), &y); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(y)
	if err != nil {
		t.Fatal(err)
	}
	var per ratelimitfilterv3.RateLimitPerRoute
	if err := protojson.Unmarshal(js, &per); err != nil {
		t.Fatalf("not Envoy's: %v", err)
	}
	if err := validateAll(&per); err != nil {
		t.Fatal(err)
	}
	if rl := per.GetRateLimits(); len(rl) != 2 || rl[0].GetApplyOnStreamDone() || !rl[1].GetApplyOnStreamDone() || rl[1].GetHitsAddend().GetFormat() == "" {
		t.Errorf("want a request-path entry and a stream-done twin with a hits_addend format: %v", rl)
	}
}

// validateAll validates m and every message inside it, the typed configs
// (Any) unpacked: protoc-gen-validate's ValidateAll stops at an Any.
func validateAll(m proto.Message) error {
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return err
		}
	}
	if a, ok := m.(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return err
		}
		return validateAll(inner)
	}
	var err error
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil:
		case fd.IsList():
			for i := 0; i < v.List().Len() && err == nil; i++ {
				err = validateAll(v.List().Get(i).Message().Interface())
			}
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapValue().Message() != nil {
					err = validateAll(mv.Message().Interface())
				}
				return err == nil
			})
		default:
			err = validateAll(v.Message().Interface())
		}
		return err == nil
	})
	return err
}
