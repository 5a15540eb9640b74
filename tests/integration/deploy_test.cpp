// What deploy/ ships, checked as far as this machine can: the systemd unit passes
// `systemd-analyze verify` (pointed at the built coach-node); `cmake --install` puts every
// program, the unit, its defaults file and the examples where the package expects them, and the
// installed programs run; the Kubernetes manifests hold what deploy/README.md promises (a
// StatefulSet with its store on a volume, a DaemonSet on GPU nodes with the node's address from
// the downward API, keys from a Secret), every coach-node flag they pass exists, and the pieces
// fit (ports, args, volumes, probes). Validation against Kubernetes' own schemas is
// tests/integration/k8s_schema_test.py (ctest deploy.k8s_schema).
// `kubectl apply --dry-run=client` needs an API server to map kinds: it runs where kubectl
// reaches one, else the manifests are checked by parsing alone (said in the test's output).
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/process_harness.hpp"

namespace {

namespace fs = std::filesystem;
using namespace itest;

const fs::path source{COACH_SOURCE_DIR};
const fs::path binary{COACH_BINARY_DIR};

bool have(const std::string& program) {
  return std::system(("command -v " + program + " >/dev/null 2>&1").c_str()) == 0;
}

/// Runs a shell command; its exit code and output (stdout and stderr).
std::pair<int, std::string> sh(const std::string& cmd) {
  const auto out = work_dir() / "sh.out";
  const int rc = std::system((cmd + " > " + out.string() + " 2>&1").c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(out)};
}

TEST(deploy, the_systemd_unit_passes_systemd_analyze_verify) {
  if (!have("systemd-analyze")) GTEST_SKIP() << "systemd-analyze (Debian systemd) is not here";
  const auto dir = work_dir() / "unit";
  fs::create_directories(dir);
  std::string unit = slurp(source / "deploy/systemd/coach-node.service");
  const std::string exec = "/usr/bin/coach-node";
  ASSERT_NE(unit.find("ExecStart=" + exec), std::string::npos) << unit;
  // Verified against the built program (the packaged path exists only once installed).
  unit.replace(unit.find(exec), exec.size(), (binary / "apps/coach-node").string());
  std::ofstream(dir / "coach-node.service") << unit;
  auto [rc, out] = sh("systemd-analyze verify " + (dir / "coach-node.service").string());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "") << "no warning either";
  // Stop drains (SIGTERM, time for --drain-timeout), a failure restarts.
  EXPECT_NE(unit.find("KillSignal=SIGTERM"), std::string::npos);
  EXPECT_NE(unit.find("TimeoutStopSec=660"), std::string::npos);
  EXPECT_NE(unit.find("Restart=on-failure"), std::string::npos);
}

TEST(deploy, cmake_install_puts_programs_unit_and_examples_where_the_package_has_them) {
  const auto root = work_dir() / "root";
  fs::remove_all(root);
  auto [rc, out] =
      sh("DESTDIR=" + root.string() + " cmake --install " + binary.string() + " --prefix /usr");
  ASSERT_EQ(rc, 0) << out;
  for (const char* f :
       {"usr/bin/coach", "usr/bin/coach-node", "usr/bin/coach-sim", "usr/bin/coach-invocation",
        "usr/lib/systemd/system/coach-node.service", "etc/default/coach-node",
        "usr/share/coach/examples/digits-mlp.yaml", "usr/share/doc/coach/README.md",
        "usr/share/doc/coach/deploy/kubernetes/scheduler.yaml"})
    EXPECT_TRUE(fs::exists(root / f)) << f << " not installed:\n" << out;
  auto [vrc, version] = sh((root / "usr/bin/coach").string() + " --version");
  EXPECT_EQ(vrc, 0) << version;
  EXPECT_EQ(version.rfind("coach 0.", 0), 0u) << version;
  // The defaults file's example arguments are flags coach-node has.
  auto [hrc, help] = sh((root / "usr/bin/coach-node").string() + " --help");
  ASSERT_EQ(hrc, 0) << help;
  const std::regex flag(R"((--[a-z][a-z-]+))");
  const auto defaults = slurp(root / "etc/default/coach-node");
  for (std::sregex_iterator it(defaults.begin(), defaults.end(), flag), end; it != end; ++it)
    EXPECT_NE(help.find((*it)[1].str()), std::string::npos)
        << (*it)[1].str() << " (etc/default/coach-node) is no coach-node flag";
}

/// Every document of every manifest in deploy/kubernetes.
std::vector<YAML::Node> manifests() {
  std::vector<YAML::Node> docs;
  for (const auto& e : fs::directory_iterator(source / "deploy/kubernetes"))
    if (e.path().extension() == ".yaml")
      for (auto& d : YAML::LoadAllFromFile(e.path().string()))
        if (d && d.IsMap()) docs.push_back(d);
  return docs;
}

YAML::Node find(const std::vector<YAML::Node>& docs, const std::string& kind,
                const std::string& name) {
  for (const auto& d : docs)
    if (d["kind"].as<std::string>() == kind && d["metadata"]["name"].as<std::string>() == name)
      return d;
  return {};
}

TEST(deploy, the_kubernetes_manifests_hold_a_scheduler_statefulset_and_a_gpu_daemonset) {
  const auto docs = manifests();
  ASSERT_GE(docs.size(), 5u);
  for (const auto& d : docs) {
    EXPECT_TRUE(d["apiVersion"] && d["kind"] && d["metadata"]["name"]) << YAML::Dump(d);
    if (d["kind"].as<std::string>() != "Namespace")
      EXPECT_EQ(d["metadata"]["namespace"].as<std::string>(), "coach") << YAML::Dump(d);
  }
  ASSERT_TRUE(find(docs, "Namespace", "coach"));
  ASSERT_TRUE(find(docs, "Secret", "coach-keys"));
  const auto svc = find(docs, "Service", "coach-scheduler");
  ASSERT_TRUE(svc);
  const auto sts = find(docs, "StatefulSet", "coach-scheduler");
  ASSERT_TRUE(sts);
  EXPECT_EQ(svc["spec"]["selector"]["role"].as<std::string>(),
            sts["spec"]["template"]["metadata"]["labels"]["role"].as<std::string>())
      << "the Service selects the scheduler's pod";
  const auto claim = sts["spec"]["volumeClaimTemplates"][0];
  ASSERT_TRUE(claim) << "the store lives on a volume";
  const auto sched = sts["spec"]["template"]["spec"]["containers"][0];
  bool store_mounted = false;
  for (const auto& m : sched["volumeMounts"])
    store_mounted |= m["name"].as<std::string>() == claim["metadata"]["name"].as<std::string>() &&
                     m["mountPath"].as<std::string>() == "/var/lib/coach";
  EXPECT_TRUE(store_mounted);
  const auto ds = find(docs, "DaemonSet", "coach-node");
  ASSERT_TRUE(ds);
  const auto pod = ds["spec"]["template"]["spec"];
  EXPECT_TRUE(pod["nodeSelector"]) << "on GPU nodes";
  const auto node = pod["containers"][0];
  EXPECT_EQ(node["resources"]["limits"]["nvidia.com/gpu"].as<int>(), 1);
  bool pod_ip = false;
  for (const auto& e : node["env"])
    if (e["valueFrom"] && e["valueFrom"]["fieldRef"])
      pod_ip |= e["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>() == "status.podIP";
  EXPECT_TRUE(pod_ip) << "the node's address from the downward API";
  // Keys from the Secret, in both; every flag passed is one coach-node has.
  auto [hrc, help] = sh((binary / "apps/coach-node").string() + " --help");
  ASSERT_EQ(hrc, 0);
  for (const auto& c : {sched, node}) {
    bool keyed = false;
    for (const auto& e : c["env"]) keyed |= e["name"].as<std::string>() == "COACH_KEY";
    EXPECT_TRUE(keyed);
    for (const auto& a : c["args"]) {
      const auto arg = a.as<std::string>();
      const auto name = arg.substr(0, arg.find('='));
      EXPECT_NE(help.find(name), std::string::npos) << name << " is no coach-node flag";
    }
  }
  if (have("kubectl") && sh("timeout 5 kubectl get --raw /api").first == 0) {
    auto [rc, out] =
        sh("kubectl apply --dry-run=client -f " + (source / "deploy/kubernetes").string());
    EXPECT_EQ(rc, 0) << out;
  } else {
    std::printf(
        "deploy_test: no Kubernetes API server reachable: manifests checked by parsing "
        "only (kubectl apply --dry-run=client maps kinds through the server)\n");
  }
}

/// The value of `--NAME=VALUE` in a container's args; "" when it has none.
std::string arg(const YAML::Node& container, const std::string& name) {
  const auto prefix = "--" + name + "=";
  for (const auto& a : container["args"]) {
    const auto text = a.as<std::string>();
    if (text.rfind(prefix, 0) == 0) return text.substr(prefix.size());
    if (text == "--" + name) return "(set)";
  }
  return {};
}

/// The containerPort named `name`; -1 when there is none.
int port(const YAML::Node& container, const std::string& name) {
  for (const auto& p : container["ports"])
    if (p["name"].as<std::string>() == name) return p["containerPort"].as<int>();
  return -1;
}

TEST(deploy, the_statefulset_and_daemonset_keep_their_ports_args_volumes_and_probes) {
  // What deploy/README.md ("Kubernetes") promises of each, and what makes the pieces fit: the
  // ports the flags listen on are the ports declared, probed and served; every mount has its
  // volume; the keys come from the Secret; a stop has time to drain.
  const auto docs = manifests();
  const auto svc = find(docs, "Service", "coach-scheduler");
  const auto sts = find(docs, "StatefulSet", "coach-scheduler");
  const auto ds = find(docs, "DaemonSet", "coach-node");
  ASSERT_TRUE(svc && sts && ds);
  std::map<std::string, int> service_ports;
  for (const auto& p : svc["spec"]["ports"]) {
    service_ports[p["name"].as<std::string>()] = p["port"].as<int>();
    EXPECT_EQ(p["port"].as<int>(), p["targetPort"].as<int>()) << YAML::Dump(p);
  }
  EXPECT_EQ(service_ports, (std::map<std::string, int>{{"data", 7470}, {"http", 9470}}));
  EXPECT_EQ(sts["spec"]["replicas"].as<int>(), 1) << "one scheduler";
  EXPECT_EQ(sts["spec"]["serviceName"].as<std::string>(), "coach-scheduler");

  for (const auto& [what, workload] : {std::pair{"scheduler", sts}, std::pair{"node", ds}}) {
    SCOPED_TRACE(what);
    const auto pod = workload["spec"]["template"]["spec"];
    const auto c = pod["containers"][0];
    EXPECT_EQ(c["image"].as<std::string>(), "coach:0.1.0");
    EXPECT_EQ(port(c, "data"), 7470);
    EXPECT_EQ(port(c, "http"), 9470);
    EXPECT_EQ(arg(c, "listen"), "tcp://0.0.0.0:7470");
    EXPECT_EQ(arg(c, "metrics-listen"), "0.0.0.0:9470");
    EXPECT_EQ(arg(c, "http-public"), "(set)") << "probes and Prometheus come from other addresses";
    EXPECT_NE(arg(c, "advertise"), "");
    // Ready once its HTTP port answers.
    ASSERT_TRUE(c["readinessProbe"]) << "a readiness probe";
    const auto probe = c["readinessProbe"]["httpGet"];
    ASSERT_TRUE(probe) << "a readiness probe over HTTP";
    EXPECT_EQ(probe["path"].as<std::string>(), "/metrics");
    EXPECT_EQ(probe["port"].as<int>(), 9470);
    // A stop (SIGTERM) drains for up to --drain-timeout (600 s) before Kubernetes kills.
    EXPECT_GT(pod["terminationGracePeriodSeconds"].as<int>(), 600);
    // Every mount has its volume (the StatefulSet's store: its claim template).
    std::set<std::string> volumes;
    for (const auto& v : pod["volumes"]) volumes.insert(v["name"].as<std::string>());
    for (const auto& t : workload["spec"]["volumeClaimTemplates"])
      volumes.insert(t["metadata"]["name"].as<std::string>());
    std::map<std::string, std::string> mounts;
    for (const auto& m : c["volumeMounts"]) {
      EXPECT_TRUE(volumes.contains(m["name"].as<std::string>())) << YAML::Dump(m);
      mounts[m["mountPath"].as<std::string>()] = m["name"].as<std::string>();
    }
    // The keys: the Secret, read-only, where COACH_KEY points.
    ASSERT_TRUE(mounts.contains("/etc/coach/keys"));
    for (const auto& v : pod["volumes"])
      if (v["name"].as<std::string>() == mounts["/etc/coach/keys"])
        EXPECT_EQ(v["secret"]["secretName"].as<std::string>(), "coach-keys");
    std::string key;
    for (const auto& e : c["env"])
      if (e["name"].as<std::string>() == "COACH_KEY") key = e["value"].as<std::string>();
    EXPECT_EQ(key.rfind("/etc/coach/keys/", 0), 0u) << key;
  }

  // The scheduler: its store on the claim's volume at /var/lib/coach.
  const auto sched = sts["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(arg(sched, "scheduler"), "(set)");
  EXPECT_EQ(arg(sched, "store").rfind("/var/lib/coach/", 0), 0u) << arg(sched, "store");
  EXPECT_EQ(arg(sched, "advertise"), "tcp://coach-scheduler.coach.svc:7470");
  // The nodes: they join the Service's data port, advertise the pod's IP, are named after their
  // Kubernetes node, run on GPU nodes with one GPU each and read the data at /data.
  const auto pod = ds["spec"]["template"]["spec"];
  const auto node = pod["containers"][0];
  EXPECT_EQ(arg(node, "join"),
            "coach-scheduler.coach.svc:" + std::to_string(service_ports["data"]));
  EXPECT_EQ(arg(node, "advertise"), "tcp://$(POD_IP):7470");
  EXPECT_EQ(arg(node, "name"), "$(NODE_NAME)");
  std::map<std::string, std::string> fields;
  for (const auto& e : node["env"])
    if (e["valueFrom"])
      fields[e["name"].as<std::string>()] =
          e["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>();
  EXPECT_EQ(fields["POD_IP"], "status.podIP");
  EXPECT_EQ(fields["NODE_NAME"], "spec.nodeName");
  EXPECT_EQ(pod["nodeSelector"]["nvidia.com/gpu.present"].as<std::string>(), "true");
  EXPECT_EQ(node["resources"]["limits"]["nvidia.com/gpu"].as<std::string>(), "1");
  bool data = false;
  for (const auto& m : node["volumeMounts"])
    data |= m["mountPath"].as<std::string>() == "/data" && m["readOnly"].as<bool>();
  EXPECT_TRUE(data) << "the data sets, read-only at /data";
}

}  // namespace
