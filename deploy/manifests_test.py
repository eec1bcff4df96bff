"""The Kubernetes manifests (and compose file) agree with the server they deploy.

Run by ctest with ATTN_SERVER_BIN set; needs yamllint and python3-yaml
(Debian), under /usr/bin/python3.
"""
import os
import re
import shlex
import subprocess
import unittest

import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
K8S = os.path.join(ROOT, "deploy", "kubernetes")
SERVER = os.environ["ATTN_SERVER_BIN"]
CLIENT = os.environ["ATTN_CLIENT_BIN"]


def documents():
    docs = []
    for name in sorted(os.listdir(K8S)):
        if name.endswith(".yaml") and name != "kustomization.yaml":
            with open(os.path.join(K8S, name)) as f:
                docs += [d for d in yaml.safe_load_all(f) if d]
    return docs


def by_kind(kind):
    return [d for d in documents() if d["kind"] == kind]


class ManifestTest(unittest.TestCase):
    def setUp(self):
        self.deployment = by_kind("Deployment")[0]
        self.pod = self.deployment["spec"]["template"]["spec"]
        self.container = self.pod["containers"][0]
        self.args = dict(a[2:].split("=", 1) for a in self.container["args"])

    def test_yamllint(self):
        r = subprocess.run(["yamllint", "-s", "-c", os.path.join(ROOT, ".yamllint"), K8S,
                            os.path.join(ROOT, "deploy", "compose.yaml")],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_args_and_env_are_flags_the_server_accepts(self):
        env = dict(os.environ)
        for e in self.container.get("env", []):
            self.assertTrue(e["name"].startswith("ATTN_"), e["name"])
            env[e["name"]] = e["value"] if "value" in e else "4096"  # a downward-API value
        # The server parses every flag and variable before --help; a bad one fails.
        r = subprocess.run([SERVER, *self.container["args"], "--help"], env=env,
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        for e in self.container.get("env", []):
            self.assertIn(e["name"], r.stdout, "not a documented variable")

    def test_probes_and_ports_match_the_flag(self):
        port = int(self.args["port"])
        ports = {p["name"]: p["containerPort"] for p in self.container["ports"]}
        self.assertEqual(ports["grpc"], port)
        for probe in ("readinessProbe", "livenessProbe"):
            self.assertEqual(self.container[probe]["grpc"]["port"], port, probe)
        for svc in by_kind("Service"):
            self.assertEqual(svc["spec"]["ports"][0]["targetPort"], "grpc")
            self.assertEqual(svc["spec"]["ports"][0]["port"], port)
        # The Open Inference Protocol's HTTP port, on the ClusterIP Service.
        http = int(self.args["http-port"])
        self.assertEqual(ports["http"], http)
        cluster = [s for s in by_kind("Service") if s["spec"].get("clusterIP") is None][0]
        self.assertIn({"name": "http", "port": http, "targetPort": "http", "appProtocol": "http"},
                      cluster["spec"]["ports"])
        self.assertIn(None, [s["spec"].get("clusterIP") for s in by_kind("Service")])
        self.assertIn("None", [s["spec"].get("clusterIP") for s in by_kind("Service")])

    def test_session_pool_follows_the_memory_limit(self):
        """ATTN_CONTAINER_MEMORY_MB comes from the container's own memory
        limit (in MiB), and the server sizes its KV-cache pool from it."""
        env = {e["name"]: e for e in self.container["env"]}
        ref = env["ATTN_CONTAINER_MEMORY_MB"]["valueFrom"]["resourceFieldRef"]
        self.assertEqual(ref["resource"], "limits.memory")
        self.assertEqual(ref["divisor"], "1Mi")
        limit = self.container["resources"]["limits"]["memory"]
        self.assertEqual(self.container["resources"]["requests"]["memory"], limit)
        mib = int(limit[:-2]) * (1024 if limit.endswith("Gi") else 1)
        cpus = int(self.container["resources"]["limits"]["cpu"])
        request_mb = int(env["ATTN_MAX_REQUEST_MEMORY_MB"]["value"])
        # The pool the server logs at start-up in this pod (its environment,
        # its CPUs): the limit less gRPC's quota (512), the server (256), a
        # request per compute thread and the metadata (1/32 of the pool + 16).
        plain = {name: e["value"] for name, e in env.items() if "value" in e}
        proc = subprocess.Popen([SERVER, "--host", "127.0.0.1", "--port", "0",
                                 "--threads", str(cpus)],
                                env=dict(os.environ, ATTN_CONTAINER_MEMORY_MB=str(mib), **plain),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            pool = None
            for _ in range(200):
                line = proc.stdout.readline()
                m = re.search(r"KV-cache sessions: pool (\d+) MiB", line)
                if m:
                    pool = int(m.group(1))
                if pool is not None or not line or "SERVING" in line:
                    break
            self.assertEqual(pool, (mib - 512 - 256 - cpus * request_mb - 16) * 32 // 33)
            self.assertLessEqual(pool + pool // 32 + 16 + 512 + 256 + cpus * request_mb, mib,
                                 "every budget fits the pod")
        finally:
            proc.kill()
            proc.wait()

    def test_models_volume_is_the_model_dir(self):
        mounts = {m["mountPath"]: m for m in self.container["volumeMounts"]}
        self.assertIn(self.args["model-dir"], mounts)
        self.assertTrue(mounts[self.args["model-dir"]]["readOnly"])

    def test_whole_equal_cpus_and_a_longer_termination_grace(self):
        res = self.container["resources"]
        self.assertEqual(res["requests"]["cpu"], res["limits"]["cpu"])
        self.assertEqual(float(res["limits"]["cpu"]), int(float(res["limits"]["cpu"])))
        self.assertGreater(self.pod["terminationGracePeriodSeconds"],
                           float(self.args["shutdown-grace"]))

    def test_security_context(self):
        sc = self.container["securityContext"]
        self.assertFalse(sc["allowPrivilegeEscalation"])
        self.assertTrue(sc["readOnlyRootFilesystem"])
        self.assertTrue(self.pod["securityContext"]["runAsNonRoot"])
        self.assertNotEqual(self.pod["securityContext"]["runAsUser"], 0)

    def test_autoscaler_and_disruption_budget_target_the_deployment(self):
        hpa = by_kind("HorizontalPodAutoscaler")[0]
        self.assertEqual(hpa["spec"]["scaleTargetRef"]["name"], self.deployment["metadata"]["name"])
        self.assertEqual(hpa["spec"]["metrics"][0]["resource"]["name"], "cpu")
        pdb = by_kind("PodDisruptionBudget")[0]
        self.assertEqual(pdb["spec"]["selector"]["matchLabels"],
                         self.deployment["spec"]["selector"]["matchLabels"])


class ComposeTest(unittest.TestCase):
    def test_compose_runs_the_image_with_flags_the_server_accepts(self):
        with open(os.path.join(ROOT, "deploy", "compose.yaml")) as f:
            compose = yaml.safe_load(f)
        svc = compose["services"]["attention"]
        r = subprocess.run([SERVER, *svc["command"], "--help"], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(any(v.endswith(":/models:ro") for v in svc["volumes"]))
        self.assertEqual(compose["services"]["lb"]["depends_on"]["attention"]["condition"],
                         "service_healthy")


class ImageTest(unittest.TestCase):
    """The Dockerfile builds from every source folder and checks health with
    flags the client accepts (the container itself: deploy/container_test.sh)."""

    def setUp(self):
        with open(os.path.join(ROOT, "Dockerfile")) as f:
            self.dockerfile = f.read()

    def test_every_source_folder_is_copied_into_the_build(self):
        with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
            folders = re.findall(r"^add_subdirectory\((\w+)\)", f.read(), re.M)
        self.assertIn("wire", folders)
        for folder in folders:
            if folder != "tests":
                self.assertIn(f"COPY {folder} {folder}\n", self.dockerfile, folder)

    def check_client_args(self, args):
        r = subprocess.run([CLIENT, *args, "--help"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, f"{args}: {r.stderr}")

    def test_healthchecks_use_flags_the_client_accepts(self):
        cmd = re.search(r"CMD attention-client (.*?) \|\|", self.dockerfile).group(1)
        self.check_client_args(shlex.split(cmd.replace("${ATTN_PORT}", "50051")))
        with open(os.path.join(ROOT, "deploy", "compose.yaml")) as f:
            test = yaml.safe_load(f)["services"]["attention"]["healthcheck"]["test"]
        self.assertEqual(test[:2], ["CMD", "attention-client"])
        self.check_client_args(test[2:])
        # A spelling the client refuses fails this check.
        r = subprocess.run([CLIENT, "health", "--timeout-ms", "2000", "--help"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout)


if __name__ == "__main__":
    unittest.main()
