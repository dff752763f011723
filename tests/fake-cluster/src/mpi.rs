//! What the MPI Operator (v0.8.x, `kubeflow.org/v2beta1`) makes for an MPIJob, as pure
//! functions of the MPIJob: the ssh Secret, the hostfile ConfigMap, the headless Service, the
//! worker pods and the launcher's pod template. `controllers.rs` creates and updates them.
//!
//! Names and shapes follow the operator's controller: Service `<job>` selecting every pod of
//! the job (launcher included), pods' `hostname` = their name and `subdomain` = `<job>`,
//! hostfile lines `<pod>.<job>.<ns>.svc slots=N` (Open MPI) or `<pod>.<job>.<ns>.svc:N`
//! (Intel MPI, MPICH), `discover_hosts.sh` listing only Running workers, the ssh Secret
//! mounted on the first container at `sshAuthMountPath` with items `id_rsa`, `id_rsa.pub`,
//! `authorized_keys` (`defaultMode` 0600 only for `/root/.ssh`), the ConfigMap at `/etc/mpi`
//! on the launcher only (`hostfile` 0444, `discover_hosts.sh` 0555).

use serde_json::{Value, json};
use ssh_key::{Algorithm, LineEnding, PrivateKey, rand_core::OsRng};

use crate::util::{self, name_of, ns_of, s};

pub const OPERATOR_NAME_LABEL: &str = "training.kubeflow.org/operator-name";
pub const JOB_NAME_LABEL: &str = "training.kubeflow.org/job-name";
pub const JOB_ROLE_LABEL: &str = "training.kubeflow.org/job-role";
pub const REPLICA_INDEX_LABEL: &str = "training.kubeflow.org/replica-index";
pub const CONFIG_MOUNT_PATH: &str = "/etc/mpi";
const CONFIG_VOLUME: &str = "mpi-job-config";
const SSH_VOLUME: &str = "ssh-auth";
const ROOT_SSH_PATH: &str = "/root/.ssh";
const RSH_ARGS: &str = "-o ConnectionAttempts=10";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Implementation {
    OpenMpi,
    Intel,
    Mpich,
}

/// The MPIJob's settings after the operator's defaulting.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub name: String,
    pub ns: String,
    pub slots: i64,
    pub workers: i64,
    pub implementation: Implementation,
    pub ssh_path: String,
    pub launcher_as_worker: bool,
    /// `launcherCreationPolicy: WaitForWorkersReady`.
    pub wait_for_workers: bool,
}

impl JobSpec {
    pub fn of(mj: &Value) -> JobSpec {
        let implementation = match s(mj, "/spec/mpiImplementation") {
            Some("Intel") => Implementation::Intel,
            Some("MPICH") => Implementation::Mpich,
            _ => Implementation::OpenMpi,
        };
        JobSpec {
            name: name_of(mj).to_string(),
            ns: ns_of(mj).to_string(),
            slots: mj
                .pointer("/spec/slotsPerWorker")
                .and_then(Value::as_i64)
                .unwrap_or(1),
            // The operator defaults Worker replicas to 0.
            workers: mj
                .pointer("/spec/mpiReplicaSpecs/Worker")
                .map(|w| w.get("replicas").and_then(Value::as_i64).unwrap_or(0))
                .unwrap_or(0)
                .max(0),
            implementation,
            ssh_path: s(mj, "/spec/sshAuthMountPath")
                .filter(|p| !p.is_empty())
                .unwrap_or(ROOT_SSH_PATH)
                .to_string(),
            launcher_as_worker: mj
                .pointer("/spec/runLauncherAsWorker")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            wait_for_workers: s(mj, "/spec/launcherCreationPolicy") == Some("WaitForWorkersReady"),
        }
    }

    /// `<pod>.<job>.<ns>.svc`: what the operator writes for each host.
    pub fn fqdn(&self, pod: &str) -> String {
        format!("{pod}.{}.{}.svc", self.name, self.ns)
    }

    pub fn worker_name(&self, i: i64) -> String {
        format!("{}-worker-{i}", self.name)
    }

    pub fn launcher_name(&self) -> String {
        format!("{}-launcher", self.name)
    }

    /// One line per host: the launcher first when it runs as a worker, then every worker
    /// replica (whether or not its pod exists yet).
    pub fn hostfile(&self) -> String {
        let launcher = self
            .launcher_as_worker
            .then(|| self.launcher_name())
            .into_iter();
        launcher
            .chain((0..self.workers).map(|i| self.worker_name(i)))
            .map(|h| match self.implementation {
                Implementation::OpenMpi => format!("{} slots={}\n", self.fqdn(&h), self.slots),
                Implementation::Intel | Implementation::Mpich => {
                    format!("{}:{}\n", self.fqdn(&h), self.slots)
                }
            })
            .collect()
    }

    /// `discover_hosts.sh`: `echo <fqdn>` for the launcher (when it runs as a worker) and for
    /// each Running worker pod, sorted by pod name. No slot counts, as the operator writes it.
    pub fn discover_hosts(&self, running_workers: &[&str]) -> String {
        let mut names: Vec<&str> = running_workers.to_vec();
        names.sort_unstable();
        let mut out = String::from("#!/bin/sh\n");
        if self.launcher_as_worker {
            out.push_str(&format!("echo {}\n", self.fqdn(&self.launcher_name())));
        }
        for n in names {
            out.push_str(&format!("echo {}\n", self.fqdn(n)));
        }
        out
    }

    pub fn labels(&self, role: &str) -> Value {
        json!({
            OPERATOR_NAME_LABEL: "mpi-operator",
            JOB_NAME_LABEL: self.name,
            JOB_ROLE_LABEL: role,
        })
    }

    /// The headless Service `<job>`, selecting every pod of the job.
    pub fn service(&self, owner: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": self.name, "namespace": self.ns, "labels": {"app": self.name}, "ownerReferences": [owner]},
            "spec": {
                "clusterIP": "None",
                "selector": {OPERATOR_NAME_LABEL: "mpi-operator", JOB_NAME_LABEL: self.name},
                "publishNotReadyAddresses": self.launcher_as_worker,
            },
        })
    }

    /// The Secret `<job>-ssh` with a fresh ed25519 key pair (the operator makes an ECDSA P-521
    /// one; OpenSSH treats both alike).
    pub fn ssh_secret(&self, owner: Value) -> Result<Value, String> {
        let key = PrivateKey::random(&mut OsRng, Algorithm::Ed25519)
            .map_err(|e| format!("generating an ssh key: {e}"))?;
        let private = key
            .to_openssh(LineEnding::LF)
            .map_err(|e| format!("encoding the ssh key: {e}"))?;
        let public = key
            .public_key()
            .to_openssh()
            .map_err(|e| format!("encoding the ssh public key: {e}"))?;
        Ok(json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/ssh-auth",
            "metadata": {"name": format!("{}-ssh", self.name), "namespace": self.ns, "labels": {"app": self.name}, "ownerReferences": [owner]},
            "data": {
                "ssh-privatekey": util::base64(private.as_bytes()),
                "ssh-publickey": util::base64(format!("{public}\n").as_bytes()),
            },
        }))
    }

    pub fn config_map(&self, owner: Value, data: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{}-config", self.name), "namespace": self.ns, "labels": {"app": self.name}, "ownerReferences": [owner]},
            "data": data,
        })
    }

    /// The ssh Secret volume on the pod and its mount on the first container.
    fn setup_ssh(&self, spec: &mut Value) {
        let mut secret = json!({
            "secretName": format!("{}-ssh", self.name),
            "items": [
                {"key": "ssh-privatekey", "path": "id_rsa"},
                {"key": "ssh-publickey", "path": "id_rsa.pub"},
                {"key": "ssh-publickey", "path": "authorized_keys"},
            ],
        });
        if self.ssh_path == ROOT_SSH_PATH {
            secret["defaultMode"] = json!(0o600);
        }
        push(
            spec,
            "volumes",
            json!({"name": SSH_VOLUME, "secret": secret}),
        );
        if let Some(c) = first_container(spec) {
            push(
                c,
                "volumeMounts",
                json!({"name": SSH_VOLUME, "mountPath": self.ssh_path}),
            );
        }
    }

    /// Worker pod `i` from the Worker template (restartPolicy already applied).
    pub fn worker_pod(&self, template: &Value, i: i64, owner: Value) -> Value {
        let name = self.worker_name(i);
        let mut labels = template
            .pointer("/metadata/labels")
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        merge(&mut labels, &self.labels("worker"));
        let index = if self.launcher_as_worker { i + 1 } else { i };
        labels[REPLICA_INDEX_LABEL] = json!(index.to_string());
        let mut spec = template
            .get("spec")
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        spec["hostname"] = json!(name);
        spec["subdomain"] = json!(self.name);
        if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
            spec["dnsPolicy"] = json!("ClusterFirstWithHostNet");
        }
        let search = format!("{}.{}.svc.cluster.local", self.name, self.ns);
        if !spec["dnsConfig"].is_object() {
            spec["dnsConfig"] = json!({});
        }
        push(&mut spec["dnsConfig"], "searches", json!(search));
        if let Some(c) = first_container(&mut spec) {
            let no_cmd = |k: &str| c.get(k).and_then(Value::as_array).is_none_or(Vec::is_empty);
            if no_cmd("command") && no_cmd("args") {
                c["command"] = json!(["/usr/sbin/sshd", "-De"]);
            }
            push(
                c,
                "env",
                json!({"name": "K_MPI_JOB_ROLE", "value": "worker"}),
            );
        }
        self.setup_ssh(&mut spec);
        let mut meta = json!({"name": name, "namespace": self.ns, "labels": labels, "ownerReferences": [owner]});
        if let Some(a) = template.pointer("/metadata/annotations") {
            meta["annotations"] = a.clone();
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
    }

    /// The launcher Job's pod template from the Launcher template (restartPolicy applied).
    pub fn launcher_template(&self, template: &Value) -> Value {
        let mut t = template.clone();
        if !t.is_object() {
            t = json!({});
        }
        let mut labels = t
            .pointer("/metadata/labels")
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        merge(&mut labels, &self.labels("launcher"));
        if self.launcher_as_worker {
            labels[REPLICA_INDEX_LABEL] = json!("0");
        }
        if !t["metadata"].is_object() {
            t["metadata"] = json!({});
        }
        t["metadata"]["labels"] = labels;
        if !t["spec"].is_object() {
            t["spec"] = json!({});
        }
        let spec = &mut t["spec"];
        spec["hostname"] = json!(self.launcher_name());
        spec["subdomain"] = json!(self.name);
        if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
            spec["dnsPolicy"] = json!("ClusterFirstWithHostNet");
        }
        let hostfile = format!("{CONFIG_MOUNT_PATH}/hostfile");
        let slots = self.slots.to_string();
        let mut env: Vec<(&str, &str)> = vec![("K_MPI_JOB_ROLE", "launcher")];
        match self.implementation {
            Implementation::OpenMpi => env.extend([
                ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
                ("OMPI_MCA_orte_default_hostfile", hostfile.as_str()),
                ("OMPI_MCA_plm_rsh_args", RSH_ARGS),
                ("OMPI_MCA_orte_set_default_slots", slots.as_str()),
            ]),
            Implementation::Intel => env.extend([
                ("I_MPI_HYDRA_HOST_FILE", hostfile.as_str()),
                ("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", RSH_ARGS),
                ("I_MPI_PERHOST", slots.as_str()),
            ]),
            Implementation::Mpich => env.extend([
                ("HYDRA_HOST_FILE", hostfile.as_str()),
                ("HYDRA_LAUNCH_EXTRA_ARGS", RSH_ARGS),
            ]),
        }
        if !self.launcher_as_worker {
            // Empty values: the launcher must not use GPUs.
            env.extend([
                ("NVIDIA_VISIBLE_DEVICES", ""),
                ("NVIDIA_DRIVER_CAPABILITIES", ""),
            ]);
        }
        if let Some(c) = first_container(spec) {
            for (k, v) in env {
                push(c, "env", json!({"name": k, "value": v}));
            }
        }
        self.setup_ssh(spec);
        push(
            spec,
            "volumes",
            json!({"name": CONFIG_VOLUME, "configMap": {
                "name": format!("{}-config", self.name),
                "items": [
                    {"key": "hostfile", "path": "hostfile", "mode": 0o444},
                    {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555},
                ],
            }}),
        );
        if let Some(c) = first_container(spec) {
            push(
                c,
                "volumeMounts",
                json!({"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT_PATH}),
            );
        }
        t
    }
}

fn first_container(spec: &mut Value) -> Option<&mut Value> {
    spec.pointer_mut("/containers/0").filter(|c| c.is_object())
}

/// Appends to the array `key` of `obj` (created when absent), as the operator's `append`.
fn push(obj: &mut Value, key: &str, item: Value) {
    if !obj[key].is_array() {
        obj[key] = json!([]);
    }
    obj[key].as_array_mut().expect("array").push(item);
}

fn merge(into: &mut Value, from: &Value) {
    if let Some(m) = from.as_object() {
        for (k, v) in m {
            into[k] = v.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(extra: Value) -> JobSpec {
        let mut mj = json!({"metadata": {"name": "pi", "namespace": "ns1"},
            "spec": {"slotsPerWorker": 2, "mpiReplicaSpecs": {"Worker": {"replicas": 2}}}});
        merge(&mut mj["spec"], &extra);
        JobSpec::of(&mj)
    }

    #[test]
    fn hostfile_forms() {
        assert_eq!(
            job(json!({})).hostfile(),
            "pi-worker-0.pi.ns1.svc slots=2\npi-worker-1.pi.ns1.svc slots=2\n"
        );
        assert_eq!(
            job(json!({"mpiImplementation": "MPICH", "runLauncherAsWorker": true})).hostfile(),
            "pi-launcher.pi.ns1.svc:2\npi-worker-0.pi.ns1.svc:2\npi-worker-1.pi.ns1.svc:2\n"
        );
        assert_eq!(
            job(json!({})).discover_hosts(&["pi-worker-1", "pi-worker-0"]),
            "#!/bin/sh\necho pi-worker-0.pi.ns1.svc\necho pi-worker-1.pi.ns1.svc\n"
        );
        assert_eq!(job(json!({})).discover_hosts(&[]), "#!/bin/sh\n");
    }

    #[test]
    fn ssh_modes_and_worker_defaults() {
        let t = json!({"spec": {"containers": [{"name": "w", "image": "i"}, {"name": "side", "image": "i"}]}});
        let p = job(json!({})).worker_pod(&t, 1, json!({}));
        assert_eq!(p["spec"]["volumes"][0]["secret"]["defaultMode"], 0o600);
        assert_eq!(
            p["spec"]["containers"][0]["command"],
            json!(["/usr/sbin/sshd", "-De"])
        );
        assert_eq!(
            p["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
            "/root/.ssh"
        );
        assert!(p["spec"]["containers"][1].get("volumeMounts").is_none());
        assert_eq!(p["metadata"]["labels"][REPLICA_INDEX_LABEL], "1");
        let p = job(json!({"sshAuthMountPath": "/home/u/.ssh"})).worker_pod(&t, 0, json!({}));
        assert!(
            p["spec"]["volumes"][0]["secret"]
                .get("defaultMode")
                .is_none()
        );
        let l = job(json!({"mpiImplementation": "Intel"})).launcher_template(&t);
        let env = &l["spec"]["containers"][0]["env"];
        assert!(
            env.as_array()
                .unwrap()
                .iter()
                .any(|e| e["name"] == "I_MPI_PERHOST" && e["value"] == "2")
        );
        assert_eq!(
            l["spec"]["volumes"][1]["configMap"]["items"][1]["mode"],
            0o555
        );
    }
}
